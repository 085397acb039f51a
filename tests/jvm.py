"""The JVM options of every Spark process the tests start.

The tests run many short Spark jobs on two cores, where C2's compilations and the parallel collector's threads cost
more CPU than they save (a test module's JVM time measured down by a third with these). The session fixture's JVM
and those of the processes the tests start take them as spark-submit's default options (to which a session's own
``spark.driver.extraJavaOptions`` adds), and the cluster's daemons as theirs (``SPARK_DAEMON_JAVA_OPTS``).
"""

from __future__ import annotations

JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
DEFAULT_OPTIONS = {"spark.driver.defaultJavaOptions": JVM_OPTIONS, "spark.executor.defaultJavaOptions": JVM_OPTIONS}
SUBMIT_ARGS = " ".join(f'--conf "{key}={value}"' for key, value in DEFAULT_OPTIONS.items()) + " pyspark-shell"
