"""The supported Spark lines: which pyspark and delta-spark pair, the Maven coordinates
each line asks for, and the error for anything else (``make test-fast``: no JVM).
One test starts an interpreter without site-packages, to import sparkqueue with
no pyspark at all."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sparkqueue import QueueError, UnsupportedSpark
from sparkqueue.store import lines
from sparkqueue.store.lines import LINES, check

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("pyspark, delta, scala, package", [
    ("3.5.7", "3.3.2", "2.12", "io.delta:delta-spark_2.12:3.3.2"),
    ("3.5.0", "3.3.0", "2.13", "io.delta:delta-spark_2.13:3.3.0"),
    ("4.0.2", "4.0.1", "2.13", "io.delta:delta-spark_2.13:4.0.1"),
    ("4.1.1", "4.1.0", "2.13", "io.delta:delta-spark_4.1_2.13:4.1.0"),
    ("4.1.0", "4.4.0", "2.13", "io.delta:delta-spark_4.1_2.13:4.4.0"),
    ("4.2.0", "4.4.0", "2.13", "io.delta:delta-spark_4.2_2.13:4.4.0"),
])
def test_each_line_asks_for_the_delta_jar_maven_names_for_it(
        pyspark: str, delta: str, scala: str, package: str) -> None:
    found = check(pyspark, delta)
    assert found.line.delta_package(delta, scala) == package


def test_only_spark_3_5_takes_the_connect_server_as_a_package() -> None:
    assert LINES["3.5"].connect_package("3.5.7") == "org.apache.spark:spark-connect_2.12:3.5.7"
    assert [s for s, line in LINES.items() if line.connect_package("x") is None] == [
        "4.0", "4.1", "4.2"]


def test_every_line_tests_a_pair_it_supports() -> None:
    for spark, line in LINES.items():
        assert check(line.pyspark, line.delta).line is line, spark
    # the tests run every Python from 3.10 to 3.13 across the lines
    assert sorted(line.python for line in LINES.values()) == ["3.10", "3.11", "3.12", "3.13"]


@pytest.mark.parametrize("pyspark, delta, words", [
    ("3.4.1", "2.4.0", ["pyspark 3.4.1 is not supported", "Spark 3.5 with Delta 3.3"]),
    ("4.3.0", None, ["pyspark 4.3.0 is not supported", "Spark 4.2 with Delta 4.4"]),
    ("3.5.7", "4.0.0", ["delta-spark 4.0.0 does not run on Spark 3.5", "delta-spark==3.3.2"]),
    ("4.2.0", "4.1.0", ["delta-spark 4.1.0 does not run on Spark 4.2", "delta-spark==4.4.0"]),
])
def test_an_unsupported_pair_is_one_error_naming_what_was_found_and_what_runs(
        pyspark: str, delta: str | None, words: list[str]) -> None:
    with pytest.raises(UnsupportedSpark) as e:
        check(pyspark, delta)
    assert isinstance(e.value, (QueueError, ImportError))
    for word in words:
        assert word in str(e.value)


def test_a_spark_connect_client_needs_no_delta_but_a_local_session_does() -> None:
    found = check("3.5.2", None, client_only=True)
    assert found.client_only and found.line is LINES["3.5"]
    with pytest.raises(UnsupportedSpark, match=r"delta-spark is not installed.*3\.3\.2"):
        found.delta_package()


def test_import_without_pyspark_says_what_to_install() -> None:
    run = subprocess.run(
        [sys.executable, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {str(REPO)!r}); "
         "import sparkqueue"], capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("sparkqueue.errors.UnsupportedSpark: pyspark is not installed"), last
    assert "Spark 3.5 with Delta 3.3" in last and "sparkqueue[spark]" in last


def test_the_scala_of_spark_jars_is_read_from_its_scala_library(tmp_path: Path) -> None:
    assert lines.scala_of(tmp_path) is None
    (tmp_path / "scala-library-2.12.18.jar").touch()
    assert lines.scala_of(tmp_path) == "2.12"


@pytest.mark.parametrize("hadoop, conditional", [
    ("3.3.4", False), ("3.4.1", False), ("3.4.2", True), ("3.5.0", True), ("3.4.2-amzn-1", True),
])
def test_s3_commits_by_conditional_put_from_hadoop_3_4_2_on(hadoop: str, conditional: bool) -> None:
    assert lines.conditional_puts(hadoop) is conditional


def test_a_plain_install_brings_no_spark_and_the_extra_brings_the_main_lines_pair() -> None:
    """``pip install sparkqueue`` must never move the user's pyspark, delta-spark or
    Databricks Connect: none is a required dependency. ``sparkqueue[spark]`` pins a pair
    that a supported line tests (the main line's, which ``make test`` runs)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    required = [dep.split(";")[0].split("[")[0].split("=")[0].split(">")[0].split("<")[0]
                .strip().lower() for dep in project["dependencies"]]
    assert not {"pyspark", "delta-spark", "databricks-connect"} & set(required), required
    pins = dict(dep.split("==") for dep in project["optional-dependencies"]["spark"] if "==" in dep)
    tested = {(line.pyspark, line.delta) for line in LINES.values()}
    assert (pins["pyspark[connect]"], pins["delta-spark"]) in tested, pins
