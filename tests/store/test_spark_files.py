"""The portable engine's reads of the Delta log (:class:`sparkqueue.store.files.SparkFiles`):
the newest version from the commit files after a known one, Delta's answer otherwise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from sparkqueue.store import files
from sparkqueue.store.files import SparkFiles


class NoHistory:
    """A session whose SQL fails: what is answered came from the commit files."""

    def __init__(self, spark: SparkSession) -> None:
        self.read = spark.read

    def sql(self, query: str, *args: Any) -> Any:
        raise AssertionError(f"asked Delta: {query}")


def delta_table(spark: SparkSession, path: Path, commits: int) -> str:
    for _ in range(commits):
        spark.range(1).write.format("delta").mode("append").save(str(path))
    return str(path)


def test_the_newest_version_is_read_from_the_commit_files_after_a_known_one(
        spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "PROBE", 3)  # versions 0..5 span two probes and a half
    table = delta_table(spark, tmp_path / "t", 6)
    reads = SparkFiles(spark)
    assert reads.latest_version(table, -1) == 5     # nothing known: Delta's answer
    from_files = SparkFiles(NoHistory(spark))  # type: ignore[arg-type]
    assert [from_files.latest_version(table, v) for v in (0, 2, 3, 5)] == [5, 5, 5, 5]


def test_a_known_version_that_is_not_there_asks_delta(
        spark: SparkSession, tmp_path: Path) -> None:
    table = delta_table(spark, tmp_path / "t", 2)
    reads = SparkFiles(spark)
    assert reads.latest_version(table, 40) == 1       # the table was made anew
    assert reads.latest_version(str(tmp_path / "gone"), 3) is None


def test_a_path_a_glob_would_misread_asks_delta(spark: SparkSession, tmp_path: Path) -> None:
    table = delta_table(spark, tmp_path / "t[1]", 2)
    assert SparkFiles(spark).latest_version(table, 0) == 1
    with pytest.raises(AssertionError, match="asked Delta"):
        SparkFiles(NoHistory(spark)).latest_version(table, 0)  # type: ignore[arg-type]


def test_a_take_probes_the_tasks_tables_newest_version_once(
        spark: SparkSession, root: str, clock: Any) -> None:
    """Its choice reads the file statistics at the version its commit read just
    before (``Layout.known_version``): on the portable engine each probe is a
    Spark job."""
    import sparkqueue

    sq = sparkqueue.connect(spark, root, owner="a", clock=clock, engine="portable")
    t = sq.create_tube("probed", "fifottl")
    t.put([{"n": i} for i in range(30)])
    t.take(1)  # ingests
    layout = t.context.layout
    tasks = layout.tasks("probed")
    probed: list[str] = []
    latest_version = layout.files.latest_version

    def counting(table: str, known: int) -> int | None:
        probed.append(table)
        return latest_version(table, known)

    layout.files.latest_version = counting  # type: ignore[method-assign]
    for n in (1, 5):
        probed.clear()
        assert len(t.take(n).collect()) == n
        assert probed.count(tasks) == 1, (n, probed)
