"""How the test run's JVMs start: from a class-data-sharing archive, and the
applications the tests start compile with C1 only.

Each test run starts many Spark JVMs: the two test workers and the Spark
Connect server, which live through the run, and the short-lived applications
of the multi-process tests (producers, consumers, spark-submitted sweepers,
the crash torture's roles). Much of a JVM's first minute of CPU goes to
loading and verifying Spark's classes and to the optimising (C2) compiler,
whose work a short life never pays back; the suite's two workers keep both
cores busy, so that CPU is the suite's wall time.

- ``python -m tests.jvm`` (``make test`` runs it once per venv) runs a small
  tube walk in a JVM that writes the classes it loaded into :data:`ARCHIVE`, a
  dynamic class-data-sharing archive (JDK 13+), at its exit.
- :func:`use_for_tests` puts ``-XX:SharedArchiveFile`` in
  ``SPARK_SUBMIT_OPTS``, which spark-submit gives the JVM it starts (and the
  test processes' children inherit), when the archive is there. A JVM that
  cannot use it (another JDK, other jars) starts without it, as it would anyway.
- :func:`short_lived` adds ``-XX:TieredStopAtLevel=1`` (C1 only) to the
  environment of an application a test starts. The long-lived JVMs keep C2,
  which pays back within their first minutes.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

#: The archive, beside the venv whose pyspark jars it was made from.
ARCHIVE = Path(sys.prefix) / "spark-classes.jsa"

#: The settings of the test Spark sessions that bear on speed (the local session's
#: and the Spark Connect server's).
SMALL_DATA = {
    "spark.ui.enabled": "false",
    # the tests' tables hold a few rows: one partition, one file, fewer tasks
    "spark.sql.shuffle.partitions": "1",
    "spark.default.parallelism": "1",
    "spark.databricks.delta.snapshotPartitions": "1",
    "spark.sql.adaptive.enabled": "false",
    # tiny queries, each planned once: compiling code for them costs more than it saves
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}

_QUIET = "-Xlog:cds=off,cds+dynamic=off"  # a JVM that cannot use the archive says so
_C1_ONLY = "-XX:TieredStopAtLevel=1"


def _with_options(env: Mapping[str, str], *options: str) -> dict[str, str]:
    """``env`` with ``options`` in its SPARK_SUBMIT_OPTS (each once)."""
    present = env.get("SPARK_SUBMIT_OPTS", "").split()
    return {**env, "SPARK_SUBMIT_OPTS": " ".join(
        present + [o for o in options if o not in present])}


def use_for_tests() -> None:
    """Start this process's JVMs (and its children's) from the archive, if made."""
    if ARCHIVE.exists():
        os.environ.update(_with_options(os.environ, f"-XX:SharedArchiveFile={ARCHIVE}", _QUIET))


def short_lived(**extra: str) -> dict[str, str]:
    """The environment for an application a test starts: this process's, with
    ``extra``, and C1 only for its JVM."""
    return _with_options({**os.environ, **extra}, _C1_ONLY)


def build_archive() -> None:
    """Walk a tube in a JVM that writes :data:`ARCHIVE` as it exits."""
    import sparkqueue

    part = ARCHIVE.with_suffix(".part")
    os.environ.update(_with_options(os.environ, f"-XX:ArchiveClassesAtExit={part}", _QUIET))
    spark = sparkqueue.session(app_name="sparkqueue-class-archive", master="local[2]",
                               conf=SMALL_DATA)
    with tempfile.TemporaryDirectory() as root:
        queue = sparkqueue.connect(spark, root)
        for name, driver in (("f", "fifottl"), ("u", "utubettl")):
            tube = queue.create_tube(name, driver)
            rows = [{"n": i} for i in range(20)]
            tube.put(rows, utube="a") if driver == "utubettl" else tube.put(rows)
            tube.ack(tube.take(5))
            tube.release(tube.take(2))
            tube.bury(tube.take(2))
            tube.kick(2)
            tube.peek([1, 2]).collect()
            tube.statistics()
        queue.sweep()
    spark.stop()
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is not None:  # the JVM writes the archive as it exits
        gateway.shutdown()
        gateway.proc.stdin.close()
        gateway.proc.wait(timeout=300)
    if not part.exists():  # the tests run all the same, their JVMs start without one
        print(f"the JVM wrote no class archive at {part}", file=sys.stderr)
        return
    part.replace(ARCHIVE)
    print(f"class archive: {ARCHIVE} ({ARCHIVE.stat().st_size >> 20} MiB)")


if __name__ == "__main__":
    build_archive()
