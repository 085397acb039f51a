"""The examples in the public docstrings run as written."""

from __future__ import annotations

import doctest

import pyarrow as pa

import dynsource
from dynsource import filtering


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
