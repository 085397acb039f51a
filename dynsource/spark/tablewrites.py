"""``dynsource.write``: a DataFrame into a registered dynsource table or a table directory, in any save mode; and
``dynsource.vacuum``: what killed writes left in one.

Spark's own paths reach the same writer (:mod:`dynsource.spark.writer`):
``df.write.format("dynsource").option("path", ...).mode("append" | "overwrite").save()``,
and for a registered table ``INSERT INTO`` / ``INSERT OVERWRITE``, ``df.writeTo(t).append()``
and ``df.write.insertInto(t)``. What they cannot carry is here: the modes
``error`` / ``errorifexists`` and ``ignore`` (Spark takes only append and
overwrite from a Python source), the session's ``partitionOverwriteMode``
(Spark does not pass its settings to a Python source), and a registered table's
columns matched by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from dynsource import directorynames
from dynsource.layout import abandoned
from dynsource.runtime import deployment
from dynsource.scan import files
from dynsource.scan.options import DEFAULT_ABANDONED_AGE_MS, ScanOptions, session_options
from dynsource.spark import catalog
from dynsource.spark.writeplan import check_columns

MODES = ("append", "overwrite", "error", "errorifexists", "ignore")
OVERWRITE_CONF = "spark.sql.sources.partitionOverwriteMode"


def write(df: DataFrame, target: str, *, mode: str = "append", options: Mapping[str, str] | None = None) -> None:
    """Write ``df`` into ``target``: a registered dynsource table's name, or a table directory (URL or path).

    Parameters
    ----------
    mode : str, default "append"
        As ``DataFrameWriter.mode``: ``append``; ``overwrite``, which replaces the whole table, or with
        ``partitionOverwriteMode`` ``dynamic`` (the option, else the table's stored one, else the session's
        ``spark.sql.sources.partitionOverwriteMode``) only the partitions ``df`` has rows for; ``error`` /
        ``errorifexists``, an error when the table has data; ``ignore``, nothing written when it has.
    options : mapping, optional
        Writer options: ``partitionColumns`` (DDL; a path's table otherwise keeps the partition columns of its
        directories), ``format``, ``storageOptions``, ``partitionOverwriteMode``.

    A registered table's columns are matched by name and must have the table's types.
    """
    if mode.lower() not in MODES:
        raise ValueError(f"Save mode {mode!r} is not valid; expected one of {list(MODES)}.")
    spark, options = df.sparkSession, dict(options or {})
    deployment.workers_checked(spark)  # the tasks write in Spark's Python workers
    if is_path(target):  # the session's time zone names a timestamp partition's directories
        options = {**session_options(spark, options), **options}
        scan_options = ScanOptions.parse({**options, "path": target})
        writer = df.write.format("dynsource").option("path", target)
        stored = {}
    else:
        definition = catalog.load_definition(spark, target)
        options = {**dict(definition.session), **options}
        if "format" in options and options["format"].lower() != definition.scan_options.format:
            raise ValueError(f"Option 'format' = {options['format']!r}, but table '{target}' is defined as "
                             f"{definition.scan_options.format}.")
        scan_options = definition.scan_options.with_options(options)
        writer = _aligned(df, definition, target).write.format(catalog.SOURCE_PREFIX + definition.table)
        stored = {name.lower() for name in definition.options}
    if "partitionoverwritemode" not in {*stored, *(name.lower() for name in options)}:
        options["partitionOverwriteMode"] = str(spark.conf.get(OVERWRITE_CONF, "static")).lower()
    if mode.lower() in ("error", "errorifexists", "ignore") and _has_data(scan_options):
        if mode.lower() == "ignore":
            return
        raise ValueError(f"Table '{target}' already has data (save mode '{mode}'); write with mode 'append' or "
                         "'overwrite', or choose another table.")
    writer.options(**options).mode("overwrite" if mode.lower() == "overwrite" else "append").save()


def is_path(target: str) -> bool:
    """Whether ``target`` names a table directory (a URL or a path), not a registered table."""
    return "/" in target or "://" in target


def _aligned(df: DataFrame, definition: catalog.TableDefinition, table: str) -> DataFrame:
    """``df``'s columns in the order of the table's, by name; their types must be the table's."""
    check_columns({f.name: f.dataType.simpleString() for f in df.schema.fields},
                  {f.name: f.dataType.simpleString() for f in definition.schema.fields},
                  "the DataFrame", f"table '{table}'")
    return df.select(*definition.schema.names)


def _has_data(options: ScanOptions) -> bool:
    fs, root = files.open_table(options.path, options.storage_options)
    try:
        listed = fs.ls(root, detail=False)
    except FileNotFoundError:
        return False
    return any(not directorynames.is_hidden(path.rstrip("/").rsplit("/", 1)[-1]) for path in listed)


def vacuum(target: str, *, spark: SparkSession | None = None, older_than_s: float = DEFAULT_ABANDONED_AGE_MS / 1000,
           dry_run: bool = False, storage_options: Mapping[str, Any] | None = None) -> abandoned.Abandoned:
    """Remove what writes killed before they finished left in table ``target`` more than ``older_than_s`` ago.

    ``target`` is a table directory (URL or path, opened with ``storage_options``) or, with ``spark``, a
    registered table's name. Removed: staging directories of writes killed in their task phase, pending commits
    with the files they had moved in (other readers than dynsource's list those), and commit records past their
    time with the files they replaced. Every commit does this too, for its ``abandonedWriteAgeMs``. With
    ``dry_run``, nothing is removed: the result says what would be.

    Returns
    -------
    Abandoned
        What was (or would be) removed, its paths relative to the table; ``lines()`` lists them.
    """
    if is_path(target):
        options = ScanOptions.parse({"path": target, "storageOptions": dict(storage_options or {})})
    elif spark is None:
        raise ValueError(f"Table '{target}' is a name: pass spark= to resolve it, or give the table's path.")
    else:
        options = catalog.load_definition(spark, target).scan_options
    if older_than_s < 0:
        raise ValueError(f"older_than_s = {older_than_s} is negative; expected an age in seconds, 0 or more.")
    fs, root = files.open_table(options.path, options.storage_options)
    if not fs.isdir(root):
        raise ValueError(f"Table '{target}': '{options.path}' is not a directory.")
    return abandoned.vacuum(fs, root, older_than_s, dry_run=dry_run)
