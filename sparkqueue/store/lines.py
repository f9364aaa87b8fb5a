"""The Spark lines sparkqueue runs on, and what differs between them.

A *line* is a Spark release series (major.minor) with the Delta series built
for it. This module is the one place that knows them: which pairs are
supported, the Maven coordinates that a session, ``spark-submit`` and a
Spark Connect server ask for, the Scala they are built with, and the pair
each line is tested with. What Delta's internals differ in from line to
line is :mod:`.dialect`'s.

It imports no pyspark at module level: ``import sparkqueue`` checks the
installed Spark through :func:`require` before anything imports pyspark, so
that a missing or unsupported one is one :class:`UnsupportedSpark` naming
what was found and what is supported.
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path

from ..errors import UnsupportedSpark

__all__ = ["LINES", "Line", "Installed", "check", "conditional_puts", "installed", "require",
           "scala_of", "spark_jars", "supported"]


@dataclass(frozen=True)
class Line:
    """One supported Spark line.

    ``deltas``: the Delta series (major.minor) whose releases run on it.
    ``pyspark``, ``delta``, ``python``: the releases its tests run with
    (``make test-compat``; the main line's are ``sparkqueue[spark]``'s).
    ``scala``: the Scala of Spark's own builds of the line (pip's pyspark).
    ``connect_in_jars``: whether pyspark's jars hold the Spark Connect
    server; where not (3.5), a server is started with its package.
    """

    spark: str
    deltas: tuple[str, ...]
    pyspark: str
    delta: str
    python: str
    scala: str
    connect_in_jars: bool = True

    def delta_package(self, delta: str, scala: str | None = None) -> str:
        """The Maven coordinate of Delta's jar of release ``delta`` for this line.

        Delta 3 names its jar by Scala alone (``delta-spark_2.12``), Delta 4.0 is
        ``delta-spark_2.13``, and from 4.1 on the name carries the Spark line too
        (``delta-spark_4.1_2.13``), one jar per Spark line a release supports.
        """
        major_minor = _major_minor(delta)
        scala = scala or self.scala
        if major_minor < (4, 0):
            return f"io.delta:delta-spark_{scala}:{delta}"
        if major_minor < (4, 1):
            return f"io.delta:delta-spark_2.13:{delta}"
        return f"io.delta:delta-spark_{self.spark}_2.13:{delta}"

    def connect_package(self, pyspark: str, scala: str | None = None) -> str | None:
        """The Maven coordinate of Spark Connect's server for ``pyspark``, where
        pyspark's jars lack it; None where they hold it."""
        if self.connect_in_jars:
            return None
        return f"org.apache.spark:spark-connect_{scala or self.scala}:{pyspark}"


#: The supported lines, oldest first, by Spark major.minor.
LINES: dict[str, Line] = {line.spark: line for line in (
    Line("3.5", ("3.3",), pyspark="3.5.7", delta="3.3.2", python="3.10", scala="2.12",
         connect_in_jars=False),
    Line("4.0", ("4.0",), pyspark="4.0.2", delta="4.0.1", python="3.12", scala="2.13"),
    Line("4.1", ("4.1", "4.2", "4.3", "4.4"), pyspark="4.1.1", delta="4.1.0", python="3.13",
         scala="2.13"),
    Line("4.2", ("4.4",), pyspark="4.2.0", delta="4.4.0", python="3.11", scala="2.13"),
)}


def supported() -> str:
    """The supported lines, as an error message gives them."""
    def deltas(line: Line) -> str:
        first, last = line.deltas[0], line.deltas[-1]
        return first if first == last else f"{first} to {last}"

    return "; ".join(f"Spark {line.spark} with Delta {deltas(line)}" for line in LINES.values())


@dataclass(frozen=True)
class Installed:
    """The Spark this process has: ``pyspark``'s version, its line, and Delta's
    Python package (``delta``; None when not installed: a Spark Connect client
    needs none, the server has Delta). ``client_only``: pyspark comes from
    Databricks Connect, which runs Spark Connect sessions only."""

    pyspark: str
    line: Line
    delta: str | None
    client_only: bool

    def delta_release(self) -> str:
        """The installed delta-spark's release: what a local session's Delta jar must be."""
        if self.delta is None:
            raise UnsupportedSpark(
                f"a local Spark session needs Delta's jar, and delta-spark is not installed "
                f"(found pyspark {self.pyspark}): pip install "
                f"'delta-spark=={self.line.delta}', the release that pairs with Spark "
                f"{self.line.spark}")
        return self.delta

    def delta_package(self) -> str:
        """The Maven coordinate of the Delta jar that matches the installed
        delta-spark and pyspark (with pyspark's Scala)."""
        return self.line.delta_package(self.delta_release(), scala_of(spark_jars()))

    def connect_package(self) -> str | None:
        """The Spark Connect server's package where pyspark's jars lack it."""
        return self.line.connect_package(self.pyspark, scala_of(spark_jars()))


def _series(version: str) -> str:
    """A release's major.minor: ``4.1`` of ``4.1.1``."""
    return "{}.{}".format(*_major_minor(version))


def _major_minor(version: str) -> tuple[int, int]:
    match = re.match(r"(\d+)\.(\d+)", version)
    if match is None:
        raise UnsupportedSpark(f"cannot read a version from {version!r}")
    return int(match.group(1)), int(match.group(2))


def _distribution(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


@cache
def installed() -> Installed:
    """The installed Spark and Delta, checked (:func:`check`)."""
    if importlib.util.find_spec("pyspark") is None:
        raise UnsupportedSpark(
            "pyspark is not installed. sparkqueue runs on the Spark you have "
            f"({supported()}): install pyspark and delta-spark of one of those lines, "
            "or pip install 'sparkqueue[spark]' for a tested local pair")
    from pyspark.version import __version__ as pyspark_version

    return check(pyspark_version, _distribution("delta-spark"),
                 client_only=_distribution("databricks-connect") is not None)


def check(pyspark: str, delta: str | None, client_only: bool = False) -> Installed:
    """The line of ``pyspark`` with ``delta`` (delta-spark's release, None: not
    installed); an :class:`UnsupportedSpark` when pyspark is of no supported
    line or delta-spark does not pair with it. ``client_only``: pyspark is
    Databricks Connect's."""
    found = f"pyspark {pyspark}" + (" (Databricks Connect)" if client_only else "")
    line = LINES.get(_series(pyspark))
    if line is None:
        raise UnsupportedSpark(f"{found} is not supported: sparkqueue runs on {supported()}")
    if delta is not None and _series(delta) not in line.deltas:
        raise UnsupportedSpark(
            f"delta-spark {delta} does not run on Spark {line.spark} ({found}): "
            f"Spark {line.spark} takes Delta {', '.join(line.deltas)} "
            f"(tested: delta-spark=={line.delta}); sparkqueue runs on {supported()}")
    return Installed(pyspark, line, delta, client_only)


def require() -> None:
    """Raise :class:`UnsupportedSpark` unless the installed Spark is supported."""
    installed()


#: The first Hadoop whose S3A makes a create a conditional PUT
#: (``fs.option.create.conditional.overwrite``): what sparkqueue's S3 log store
#: commits with. pip's pyspark bundles Hadoop 3.3.4 (Spark 3.5), 3.4.1 (4.0),
#: 3.4.2 (4.1) and 3.5.0 (4.2).
CONDITIONAL_PUT_HADOOP = (3, 4, 2)


def conditional_puts(hadoop: str) -> bool:
    """Whether Hadoop ``hadoop``'s S3A makes conditional PUTs."""
    parts = tuple(int(p) for p in re.findall(r"\d+", hadoop)[:3])
    return parts >= CONDITIONAL_PUT_HADOOP


def spark_jars() -> Path:
    """The folder of Spark's own jars: ``$SPARK_HOME/jars`` (spark-submit sets it, and
    its Python then imports pyspark from a zip), else the pyspark package's."""
    home = os.environ.get("SPARK_HOME")
    if home and (Path(home) / "jars").is_dir():
        return Path(home) / "jars"
    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.origin is not None, "checked by installed()"
    return Path(spec.origin).parent / "jars"


def scala_of(jars: Path) -> str | None:
    """The Scala major.minor of Spark's jars (its ``scala-library`` jar); None
    where there are none (a Spark Connect client's pyspark)."""
    for jar in jars.glob("scala-library-*.jar"):
        match = re.match(r"scala-library-(\d+\.\d+)\.", jar.name)
        if match:
            return match.group(1)
    return None
