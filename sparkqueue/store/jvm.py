"""The JVM of a classic session: Spark's logging."""

from __future__ import annotations

from pyspark.sql import SparkSession

__all__ = ["quiet_task_failures"]


def quiet_task_failures(spark: SparkSession) -> None:
    """Keep Spark from logging a stack trace per failed task.

    sparkqueue fails MERGEs on purpose (``raise_error`` guards: a batch with
    a task in the wrong state writes nothing) and reports them as typed errors.
    """
    spark.sparkContext.setLogLevel("ERROR")
    jvm = spark.sparkContext._jvm
    if jvm is None:  # pragma: no cover - Spark Connect
        return
    fatal = jvm.org.apache.logging.log4j.Level.FATAL
    for name in ("org.apache.spark.executor.Executor", "org.apache.spark.scheduler.TaskSetManager",
                 "org.apache.spark.scheduler.TaskSchedulerImpl",
                 "org.apache.spark.sql.delta", "org.apache.spark.util.Utils"):
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, fatal)
