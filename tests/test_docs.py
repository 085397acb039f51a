"""The examples in the public docstrings run as written."""

from __future__ import annotations

import dataclasses
import doctest
import re

import pyarrow as pa

import dynsource
from dynsource import filtering, options


def run_examples(obj, globs) -> None:
    finder, runner = doctest.DocTestFinder(recurse=False), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in finder.find(obj, globs=dict(globs)):
        runner.run(test)
    assert runner.failures == 0 and runner.tries > 0


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
