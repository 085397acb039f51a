"""Automatic dynamic partition pruning: ``dynsource.sql`` and ``dynsource.dynamic_join``.

A query's text (``query``) is read with sqlglot (``sqltree``), its table names resolved as Spark resolves them
(``nameresolution``), its star joins detected (``starjoin``), the dimensions collected into filters
(``dimensions``) where they pay (``benefit``), read once into snapshots (``snapshots``), and the rewritten text
run with the DataFrames it names by placeholders (``placeholders``); ``queryplan`` ties these together and
``queryreport`` records what was done. ``inserts`` writes the INSERT statements Spark cannot; ``join`` is the
DataFrame door.

Imports: every layer below. Only the driver loads it: never Spark's Python workers.
"""
