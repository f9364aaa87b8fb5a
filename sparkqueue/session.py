"""The Delta-enabled SparkSession builder."""

from __future__ import annotations

import logging
import os
import shutil
from importlib import metadata
from typing import Any

from pyspark.sql import SparkSession

from . import objectstore
from .config import load_config
from .errors import QueueError
from .store.jvm import quiet_task_failures

__all__ = ["session", "remote_session", "delta_package", "quiet_pyspark_loggers",
           "quiet_task_failures"]


def delta_package() -> str:
    """The Maven coordinate of the Delta jar matching the installed pyspark."""
    import pyspark

    major_minor = ".".join(pyspark.__version__.split(".")[:2])
    try:
        version = metadata.version("delta-spark")
    except metadata.PackageNotFoundError as e:  # pragma: no cover - install problem
        raise QueueError("the delta-spark Python package is not installed") from e
    return f"io.delta:delta-spark_{major_minor}_2.13:{version}"


def quiet_pyspark_loggers() -> None:
    """Stop PySpark logging every failed query: sparkqueue raises its own typed errors."""
    from pyspark.logger import PySparkLogger

    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)


def _check_java() -> None:
    home = os.environ.get("JAVA_HOME")
    if home and os.path.exists(os.path.join(home, "bin", "java")):
        return
    if shutil.which("java") is None:
        raise QueueError(
            "Java was not found: Spark needs a Java 17 runtime. Install one "
            "(Debian: apt-get install openjdk-17-jdk-headless) and set JAVA_HOME."
        )


def _submitted_conf() -> dict[str, str]:
    """The settings spark-submit started this process's JVM with ({} outside spark-submit)."""
    if not os.environ.get("PYSPARK_GATEWAY_PORT"):
        return {}
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # connects to spark-submit's JVM; starts nothing
    return {str(k): str(v) for k, v in SparkConf().getAll()}


def submit_args(root: str | None = None) -> list[str]:
    """The ``spark-submit`` options a job on ``root`` (default: conf/'s) needs beside
    conf/spark-submit.conf: the packages (Delta's; on S3, hadoop-aws too) and, on
    S3, sparkqueue's log store jar (compiled now if it is not yet).

    spark-submit starts the JVM before any Python runs, so the jars a session
    built inside the job adds come too late for the driver; the settings do not
    (:func:`session` adds S3A's and the log store's). ``sparkqueue submit-args``
    prints them.
    """
    args = ["--packages", delta_package()]
    if objectstore.is_s3(root or load_config().root):
        args[1] += f",{objectstore.hadoop_aws_package()}"
        args += ["--jars", str(objectstore.log_store_jar(metadata.version("delta-spark")))]
    return args


def remote_session(url: str) -> SparkSession:
    """A Spark Connect session to ``url`` (``sc://host:port``). pyspark runs one kind
    of session per process: not beside a classic one."""
    try:
        return SparkSession.builder.remote(url).getOrCreate()
    except Exception as e:
        raise QueueError(f"could not reach Spark Connect at {url}: {e}. Is a server "
                         "running there (python -m sparkqueue.server), and pyspark's "
                         "connect extras installed (pip install 'pyspark[connect]')?") from e


def session(
    app_name: str = "sparkqueue",
    master: str | None = None,
    conf: dict[str, Any] | None = None,
    *,
    root: str | None = None,
) -> SparkSession:
    """Return a SparkSession with Delta Lake configured (extensions, catalog, jars).

    With ``SPARK_REMOTE`` set (``sc://host:port``, as pyspark reads it), a
    Spark Connect session to that server, whose Delta is the server's own
    (see :mod:`sparkqueue.server`). Otherwise reuses the active session when
    one exists (a notebook's or spark-submit's ``spark``), or builds one from
    conf/sparkqueue.toml's ``[spark]`` settings, then ``conf``, then
    ``master``; the Delta jar comes from Maven Central through
    ``spark.jars.packages``.

    ``root``: the queue root the session is for (default: conf/'s). On S3
    (``s3a://``, ``s3://``) a new session also gets Hadoop's S3A connector
    and its settings from the AWS environment (:mod:`sparkqueue.objectstore`);
    ``conf`` wins over those.

    Examples
    --------
    >>> spark = sparkqueue.session()                       # doctest: +SKIP
    >>> spark = sparkqueue.session(master="local[4]")      # doctest: +SKIP
    """
    quiet_pyspark_loggers()
    remote = os.environ.get("SPARK_REMOTE")
    if remote:
        return remote_session(remote)
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    _check_java()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    config = load_config()
    settings: dict[str, str] = dict(config.spark)
    packages = [delta_package()]
    if objectstore.is_s3(root or config.root):
        s3, more = objectstore.session_settings(metadata.version("delta-spark"))
        if settings.get("spark.jars"):
            s3["spark.jars"] = f"{settings['spark.jars']},{s3['spark.jars']}"
        settings.update(s3)
        packages += more
    settings.update({str(k): str(v) for k, v in (conf or {}).items()})
    if master is not None:
        settings["spark.master"] = master
    submitted = _submitted_conf()
    if submitted:
        # Under spark-submit the JVM is up with its command line's settings (master,
        # packages, properties file): those win over conf/ defaults.
        settings = {k: v for k, v in settings.items() if k not in submitted}
    settings.setdefault("spark.master", submitted.get("spark.master", "local[2]"))
    if ("spark.jars.packages" not in settings and not submitted
            and not os.environ.get("SPARKQUEUE_NO_PACKAGES")):
        settings["spark.jars.packages"] = ",".join(packages)
    settings["spark.sql.extensions"] = "io.delta.sql.DeltaSparkSessionExtension"
    settings["spark.sql.catalog.spark_catalog"] = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
    builder = SparkSession.builder.appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as e:
        raise QueueError(
            f"could not start Spark with Delta ({settings.get('spark.jars.packages')}): {e}. "
            "Check that Java 17 is installed and that Maven Central is reachable for the "
            "Delta jar (or that it is already in the Ivy cache)."
        ) from e
    quiet_task_failures(spark)
    return spark
