"""Planning one scan: options parsed once, ``ScanPlanner`` -> a frozen ``PlannedScan``, and its report.

The reader options (``options``), the planner (``planner``: the walk, the filters, the kept files), the packing
of files into read tasks (``splits``), the row filter the tasks apply (``rowfilter``), reading data files
(``files``), a table's schema (``tableschema``), the read tasks' figures (``taskfigures``), where a scan comes
from (``origin``) and its report (``report``).

Imports: the root vocabulary, ``dynsource.filtering`` and ``dynsource.layout``. Spark's Python workers load this
layer.
"""
