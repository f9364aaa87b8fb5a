"""The portable engine's reads of the Delta log (:class:`sparkqueue.store.files.SparkFiles`):
the newest version from the commit files after a known one, Delta's answer otherwise."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

import sparkqueue
from sparkqueue import store as st
from sparkqueue.store import files
from sparkqueue.store.files import SparkFiles


class NoHistory:
    """A session whose SQL fails: what is answered came from the commit files."""

    def __init__(self, spark: SparkSession) -> None:
        self.read = spark.read

    def sql(self, query: str, *args: Any) -> Any:
        raise AssertionError(f"asked Delta: {query}")


@contextmanager
def commit_reads(layout: Any) -> Iterator[list[str]]:
    """The files ``layout``'s log reader reads by name in the block, in order."""
    read: list[str] = []
    read_many = layout.files.read_many

    def counting(names: list[str]) -> dict[str, str]:
        read.extend(names)
        found: dict[str, str] = read_many(names)
        return found

    layout.files.read_many = counting
    try:
        yield read
    finally:
        layout.files.read_many = read_many


@contextmanager
def log_probes(layout: Any) -> Iterator[list[list[str]]]:
    """The tables whose newest version ``layout``'s log reader looks for in the
    block, one list per look (tables looked for together in one)."""
    probes: list[list[str]] = []
    latest_version, latest_versions = layout.files.latest_version, layout.files.latest_versions

    def one(table: str, known: int, texts: dict[int, str] | None = None) -> int | None:
        probes.append([table])
        found: int | None = latest_version(table, known, texts)
        return found

    def many(tables: dict[str, int], texts: dict[str, dict[int, str]]) -> dict[str, int | None]:
        probes.append(sorted(tables))
        found: dict[str, int | None] = latest_versions(tables, texts)
        return found

    layout.files.latest_version = one
    layout.files.latest_versions = many
    try:
        yield probes
    finally:
        layout.files.latest_version = latest_version
        layout.files.latest_versions = latest_versions


def portable_queue(spark: SparkSession, root: str, clock: Any) -> sparkqueue.Queue:
    """A Queue on ``root`` whose engine is the portable one, owner ``a``."""
    return sparkqueue.connect(spark, root, owner="a", clock=clock, engine="portable")


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


def test_a_probe_hands_back_the_commit_files_it_read_after_the_known_one(
        spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "PROBE", 3)
    table = delta_table(spark, tmp_path / "t", 6)
    texts: dict[int, str] = {}
    assert SparkFiles(NoHistory(spark)).latest_version(table, 1, texts) == 5  # type: ignore[arg-type]
    assert sorted(texts) == [2, 3, 4, 5]  # 3 was the second probe's known one: read in the first
    for version, text in texts.items():
        assert text == (tmp_path / "t" / "_delta_log" / f"{version:020d}.json").read_text()


def test_tables_probed_together_each_get_their_newest_version_and_texts(
        spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "PROBE", 3)
    a, b = delta_table(spark, tmp_path / "a", 2), delta_table(spark, tmp_path / "b", 5)
    texts: dict[str, dict[int, str]] = {}
    from_files = SparkFiles(NoHistory(spark))  # type: ignore[arg-type]
    assert from_files.latest_versions({a: 0, b: 1}, texts) == {a: 1, b: 4}  # b: two probes
    assert {t: sorted(v) for t, v in texts.items()} == {a: [1], b: [2, 3, 4]}
    made_anew = SparkFiles(spark)  # ``a``'s known version is not there: Delta answers for it
    assert made_anew.latest_versions({a: 7, b: 4}, {}) == {a: 1, b: 4}


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


@pytest.mark.parametrize("catalog", [False, True], ids=["path root", "catalog root"])
def test_a_take_or_a_put_probes_its_tables_newest_versions_once_together(
        spark: SparkSession, root: str, clock: Any, catalog: bool) -> None:
    """A take's choice reads the file statistics at the version its commit read
    just before (``Layout.known_version``), and the inbox's newest version and
    the tasks table's are looked for in one probe: on the portable engine each
    probe is a Spark job. A put looks for neither: its ids count from the
    cursor the take read. On a catalog root too: the probe reads the log files
    where the catalog says the tables are."""
    root = f"spark_catalog.sq_{uuid.uuid4().hex[:12]}" if catalog else root
    sq = portable_queue(spark, root, clock)
    t = sq.create_tube("probed", "fifottl")
    t.put([{"n": i} for i in range(30)])
    t.take(1)  # ingests
    layout = t.context.layout
    tasks, inbox = (layout.table_path(layout.tasks("probed")),
                    layout.table_path(layout.inbox("probed")))
    with log_probes(layout) as probes:
        for n in (1, 5):
            probes.clear()
            assert len(t.take(n).collect()) == n
            assert probes == [sorted([inbox, tasks])], (n, probes)
        probes.clear()
        t.put([{"n": 30}])  # a put since: the take ingests it, and probes no more
        assert probes == [], probes
        probes.clear()
        assert t.take(30).count() == 24
        assert [p for p in probes if tasks in p] == [sorted([inbox, tasks])], probes


def test_a_put_counts_its_ids_from_a_cursor_it_knows_and_looks_only_where_it_knows_none(
        spark: SparkSession, root: str, clock: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A put's ids count from any cursor an ingest left, so a put of a process
    that knows one (and the inbox's version) looks at neither log first: here
    ``a``'s cursor is behind ``b``'s puts and ingest, and ``a``'s ids still
    follow them. A process that knows no cursor, or one more inbox commits
    behind than ``PUT_CURSOR_LAG``, looks at both logs once."""
    a, b = portable_queue(spark, root, clock), portable_queue(spark, root, clock)
    ta = a.create_tube("counted", "fifottl")
    ta.put([{"n": i} for i in range(3)])
    ta.take(1)  # ingests: ``a`` knows the cursor
    tb = b.tube("counted")
    layout = tb.context.layout
    inbox = layout.table_path(layout.inbox("counted"))
    both = sorted([layout.table_path(layout.tasks("counted")), inbox])
    with log_probes(layout) as probes:
        assert [r["task_id"] for r in tb.put([{"n": 3}, {"n": 4}]).collect()] == [3, 4]
        assert probes[:1] == [both], probes  # ``b`` knew nothing (Delta is asked for each)
    tb.take(4)  # ``b`` ingests past ``a``'s cursor
    with log_probes(ta.context.layout) as probes:
        put = ta.put([{"n": 5}, {"n": 6}])
        assert probes == [[inbox]], probes  # ``b``'s put came first: its commit is looked for
    assert [(r["task_id"], r["data"]["n"]) for r in put.collect()] == [(5, 5), (6, 6)]
    assert sorted(r["data"]["n"] for r in ta.peek([5, 6]).collect()) == [5, 6]
    with log_probes(ta.context.layout) as probes:
        assert [r["task_id"] for r in ta.put([{"n": 7}]).collect()] == [7]
        assert probes == [], probes  # its own commit follows the version it knows
    monkeypatch.setattr(st.schema, "PUT_CURSOR_LAG", 1)  # ``a``'s cursor (the peek's): 2 behind
    with log_probes(ta.context.layout) as probes:
        assert [r["task_id"] for r in ta.put([{"n": 8}]).collect()] == [8]
        assert probes == [both], probes


def test_a_choice_by_state_reads_the_version_its_statement_looked_for(
        spark: SparkSession, root: str, clock: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A take of sub-queue heads chosen from every task, and a kick, choose from the
    tasks table at the version their statement has just looked for: the log is
    looked at once, not again for the choice (each look a Spark job here). The
    kick counts what it kicked from its MERGE's commit, not with a Spark job."""
    sq = portable_queue(spark, root, clock)
    t = sq.create_tube("by_state", "utubettl")
    t.put([{"n": i} for i in range(6)], utube="a")
    t.put([{"n": i} for i in range(6)], utube="b")
    t.ack(t.take(1))  # ingests
    layout = t.context.layout
    tasks, inbox = (layout.table_path(layout.tasks("by_state")),
                    layout.table_path(layout.inbox("by_state")))
    with log_probes(layout) as probes:
        heads = t.take(2)
        assert [r["utube"] for r in heads.collect()] == ["a", "b"]
        assert probes == [sorted([inbox, tasks])], probes
        t.bury(heads)
        probes.clear()

        def no_count(frame: Any) -> int:
            raise AssertionError("counted with a Spark job")
        with monkeypatch.context() as m:
            m.setattr(type(spark.range(1)), "count", no_count)
            assert t.kick(1) == 1
        assert probes == [[tasks]], probes


def test_a_take_and_its_ack_read_each_commit_file_once(
        spark: SparkSession, root: str, clock: Any) -> None:
    """A commit file never changes: the one a verb committed is read to find its
    commit, then to read what it removed, then by the next verb's file
    statistics; each read of it past the first would be a Spark job."""
    sq = portable_queue(spark, root, clock)
    t = sq.create_tube("read_once", "fifottl")
    t.put([{"n": i} for i in range(30)])
    t.ack(t.take(1))  # ingests
    with commit_reads(t.context.layout) as read:
        for _ in range(3):
            t.ack(t.take(2))
    commits = [f for f in read if f.endswith(".json")]
    assert commits and len(commits) == len(set(commits)), commits
    assert t.statistics()["tasks"]["done"] == 7


@pytest.mark.parametrize("catalog", [False, True], ids=["path root", "catalog root"])
def test_a_tube_made_here_is_put_to_without_asking_delta_for_its_versions(
        spark: SparkSession, root: str, clock: Any, catalog: bool) -> None:
    """The tables ``create_tube`` made are at version 0, written down: the first
    put looks for their newest versions from there, in the commit files, not
    with Delta's history command (a command for each table)."""
    root = f"spark_catalog.sq_{uuid.uuid4().hex[:12]}" if catalog else root
    sq = portable_queue(spark, root, clock)
    t = sq.create_tube("made", "fifottl")
    layout = t.context.layout
    assert isinstance(layout.files, SparkFiles)
    layout.files.spark = NoHistory(spark)  # type: ignore[assignment]
    try:
        t.put([{"n": i} for i in range(3)])
    finally:
        layout.files.spark = spark
    assert sorted(r["data"]["n"] for r in t.take(3).collect()) == [0, 1, 2]


def test_a_new_tubes_first_put_reads_no_commit_of_its_tasks_table(
        spark: SparkSession, root: str, clock: Any) -> None:
    """The tasks table ``create_tube`` made holds no ingest at its version 0: the
    first put counts its ids from the first cursor without reading that
    commit (a Spark job); it reads its own commit alone, to find it."""
    sq = portable_queue(spark, root, clock)
    t = sq.create_tube("first_put", "fifottl")
    layout = t.context.layout
    with commit_reads(layout) as read:
        put = t.put([{"n": i} for i in range(3)])
    inbox = layout.table_path(layout.inbox("first_put"))
    assert read == [f"{inbox}/_delta_log/00000000000000000001.json"], read
    assert sorted(r["task_id"] for r in put.collect()) == [0, 1, 2]
    assert sorted(r["data"]["n"] for r in t.take(3).collect()) == [0, 1, 2]
