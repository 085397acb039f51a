"""The examples in the README and in the public docstrings run as written."""

from __future__ import annotations

import dataclasses
import doctest
import re
from pathlib import Path

import pyarrow as pa

import dynsource
from dynsource import filtering
from dynsource.scan import options, resolution


def run_examples(obj, globs) -> None:
    finder, runner = doctest.DocTestFinder(recurse=False), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in finder.find(obj, globs=dict(globs)):
        runner.run(test)
    assert runner.failures == 0 and runner.tries > 0


README = Path(__file__).resolve().parent.parent / "README.md"
OWN_SOURCE = README.parent / "docs" / "own-source.md"


def run_blocks(document: Path, namespace: dict) -> None:
    """The document's Python blocks, one after the other in ``namespace``."""
    blocks = re.findall(r"```python\n(.*?)```", document.read_text(), re.DOTALL)
    assert len(blocks) >= 2
    for index, block in enumerate(blocks):
        exec(compile(block, f"{document.name}, python block {index + 1}", "exec"), namespace)


def test_every_readme_snippet_runs_as_written_in_order(spark, tmp_path, monkeypatch):
    """The README's Python blocks, one after the other in one namespace, from an empty directory: what a newcomer
    pasting them meets (the quickstart writes the demo's tables there)."""
    monkeypatch.chdir(tmp_path)
    try:
        run_blocks(README, {})
    finally:
        dynsource.drop_table(spark, "store_sales")


def test_the_own_source_example_runs_as_written_in_order(spark, tmp_path, monkeypatch):
    """docs/own-source.md's source, defined as written, takes the filter its example collects; its options table
    names every option dynamic_filter reads."""
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    try:
        run_blocks(OWN_SOURCE, namespace)
    finally:
        spark.sql("DROP TABLE IF EXISTS orders")
    assert (namespace["orders"].count(), namespace["joined"].count()) == (40, 40)
    assert namespace["everything"].load().count() == 1000
    (assignment,) = dynsource.scan_report(namespace["pruned"]).assignments
    assert assignment.scan == "default.orders AS o" and assignment.keys == 2
    text = OWN_SOURCE.read_text()
    assert all(f"`{name}`" in text for name in resolution.OPTION_NAMES)


def test_data_source_docstring_example_runs(spark):
    run_examples(dynsource.DynsourceDataSource, {"spark": spark})


def test_filtering_data_docstring_example_runs():
    run_examples(filtering.DynamicFilteringData, {"DynamicFilteringData": filtering.DynamicFilteringData,
                                                   "pa": pa})


def test_sql_docstring_example_runs(spark):
    run_examples(dynsource.sql, {"spark": spark})


def test_the_data_source_docstring_lists_every_option_with_its_default():
    """The DataSource docstring documents exactly the options ScanOptions defines, each default as it is."""
    entries = dict(re.findall(r"^    (\w+) : \w+, (.+)$", dynsource.DynsourceDataSource.__doc__, re.MULTILINE))
    assert sorted(entries) == sorted(options.OPTION_NAMES)
    for field in dataclasses.fields(options.ScanOptions):
        documented = entries[field.metadata["option"]]
        quoted = re.match(r'default "([^"]*)"', documented)
        if quoted:  # a default written as a value: the very one the option has
            assert quoted.group(1) == field.metadata["render"](field.default), field.name
        else:
            assert field.default in (None, (), dataclasses.MISSING) or field.name in ("min_partition_num",
                                                                                        "storage_options"), field.name


def test_options_written_back_read_as_the_same_options():
    parsed = options.ScanOptions.parse({
        "path": "memory://t", "format": "orc", "partitionColumns": "a INT, `b c` STRING", "mergeSchema": "true",
        "partitionFilter": "a > 1 AND `b c` IN ('x')", "maxPartitionBytes": "1m", "dynamicFilteringEnabled": "false",
        "storageOptions": '{"key": "k", "client_kwargs": {"endpoint_url": "http://h:1"}}', "timeZone": "UTC",
        "reader": "python", "dynamicFilter": "dynf-" + "0" * 32, "filterStore": "memory://s",
    })
    assert options.ScanOptions.parse(parsed.to_options()) == parsed
    assert options.ScanOptions.parse({"path": "/t"}).to_options() == {"path": "/t"}
