"""The Delta-enabled SparkSession builder."""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from . import objectstore
from .config import load_config
from .errors import QueueError, UnsupportedSpark
from .store import lines
from .store.jvm import quiet_task_failures

__all__ = ["session", "remote_session", "delta_package", "quiet_pyspark_loggers",
           "quiet_task_failures", "submit_args"]

#: Set (to anything but empty or 0) to see the JVM's start-up output: Ivy's
#: resolution of the Delta jar, Spark's log.
VERBOSE = "SPARKQUEUE_VERBOSE"


def delta_package() -> str:
    """The Maven coordinate of the Delta jar matching the installed pyspark and
    delta-spark (:mod:`sparkqueue.store.lines`)."""
    return lines.installed().delta_package()


def quiet_pyspark_loggers() -> None:
    """Stop PySpark logging every failed query: sparkqueue raises its own typed errors.
    (pyspark 4 has these loggers; 3.5 logs no failed query.)"""
    try:
        from pyspark.logger import PySparkLogger
    except ImportError:
        return
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
        args += objectstore.log_store_args(lines.installed().delta_release())
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

    A new session's JVM prints nothing here: its output (Ivy's resolution of
    the Delta jar, Spark's log) goes to ``sparkqueue-spark-<pid>.log`` in the
    temporary folder, whose end a failed start quotes; ``SPARKQUEUE_VERBOSE=1``
    shows it instead. Its Python workers run on this process's Python unless
    ``PYSPARK_PYTHON`` or ``spark.pyspark.python`` names another.

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
    found = lines.installed()
    if found.client_only:
        raise UnsupportedSpark(
            f"Databricks Connect's pyspark ({found.pyspark}) runs Spark Connect sessions "
            "only: set SPARK_REMOTE, or pass the DatabricksSession to sparkqueue.connect")
    _check_java()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    settings = _settings(root, conf, master)
    if settings["spark.master"].startswith("local") and "spark.pyspark.python" not in settings:
        # A local session's Python workers run on `python3` from PATH by default, which
        # may be another Python than this one (PYTHON_VERSION_MISMATCH at the first UDF)
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    verbose = os.environ.get(VERBOSE, "") not in ("", "0")
    log = Path(tempfile.gettempdir()) / f"sparkqueue-spark-{os.getpid()}.log"
    try:
        with _output_to(None if verbose else log):
            spark = builder.getOrCreate()
    except Exception as e:
        tail = "" if verbose or not log.exists() else (
            f" The JVM's output ({log}) ends:\n" + log.read_text(errors="replace")[-2000:])
        raise QueueError(
            f"could not start Spark with Delta ({settings.get('spark.jars.packages')}): {e}. "
            "Check that Java 17 is installed and that Maven Central is reachable for the "
            f"Delta jar (or that it is already in the Ivy cache).{tail}"
        ) from e
    quiet_task_failures(spark)
    return spark


def _settings(root: str | None, conf: dict[str, Any] | None,
              master: str | None) -> dict[str, str]:
    """A new local session's settings: conf/'s ``[spark]``, S3's for an S3 ``root``,
    ``conf``, ``master``, under spark-submit its own command line's; the Delta
    jar of the installed line, its SQL extension and catalog."""
    config = load_config()
    settings: dict[str, str] = dict(config.spark)
    packages = [delta_package()]
    if objectstore.is_s3(root or config.root):
        settings, more = objectstore.session_settings(lines.installed().delta_release(),
                                                      settings=settings)
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
    return settings


@contextmanager
def _output_to(log: Path | None) -> Iterator[None]:
    """Send what a JVM started now prints (Ivy's resolution, Spark's log) to ``log``
    for good: the JVM inherits this process's standard output and error as
    they are when it starts. ``None``: leave them."""
    if log is None:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    target = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(target, 1)
        os.dup2(target, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, target):
            os.close(fd)
