"""What plugs into Spark: the data source and its readers and writer, and the tables of Spark's catalog.

The ``dynsource`` Python data source and its Python reader (``source``); Spark's own file reader fed with a
planned scan (``filereader``); writes (``writeplan``, ``writer``, ``tablewrites``); a registered table's own
source and stored definition (``tablesource``), registering tables (``catalog``, ``metastore``; Spark's own
``saveAsTable`` made one, ``catalogwrites``), the other Python data sources that take a dynamic filter
(``dynamicfiltering``, ``pythonsources``), and the lasting global views a warm session reads again
(``globalviews``).

Imports: every layer below (root, ``filtering``, ``layout``, ``scan``). Spark's Python workers load ``source``,
``tablesource``, ``writer`` and ``writeplan`` (and what they import), never ``catalog``.
"""
