"""A Hive-partitioned table on a filesystem: how it is laid out, listed and changed.

Typed partition levels (``levels``), directories and their watches (``directories``, ``watches``), the static
walk and the dynamic one that wraps it (``enumerator``, FLIP-248's ``DynamicFileEnumerator``), what a walk found
(``listing``), the commit records that make writes atomic to readers (``commits``), what killed writes left
(``abandoned``) and the ``partitionFilter`` predicate (``partitionfilter``).

Imports: the root vocabulary and ``dynsource.filtering`` (the payloads a walk prunes by). Spark's Python workers
load this layer.
"""
