"""Imported at the start of every Python process the tests start (``tests/conftest.py`` puts this folder on
``PYTHONPATH``), Spark's Python workers among them: pyspark and py4j are imported from the installed packages.

Spark puts its own ``pyspark.zip`` and py4j's zip first on its workers' path. The zip holds the same pyspark as the
installed package but only its sources, so every worker compiles the modules it imports: 0.5 s of CPU for
``pyspark.worker`` against 0.08 s from the installed package's bytecode. Spark starts a fresh worker process for
each concurrent planning call and after each read that stops early (``show()``, ``first()``), so the suite starts
hundreds. Moved to the end of the path, the zips still serve what the installed packages lack.
"""

import sys

sys.path.sort(key=lambda entry: entry.endswith(("pyspark.zip", "-src.zip")))
