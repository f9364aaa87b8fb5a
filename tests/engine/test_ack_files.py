"""Acks that remove whole data files: no MERGE when the acked tasks are exactly
the rows of files whose every row is taken by the acker with a live lease.

Whatever the path, an ack means the same: the rows leave the tube, the call
counts, the change feed shows them deleted; any doubt goes to the MERGE,
which acks or refuses with the error it always gave.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from sparkqueue import FakeClock, InvalidState, NotOwner, Queue, TaskNotFound, Tube, store
from sparkqueue.engine import ingest as ingesting
from sparkqueue.engine.ingest import ingest
from sparkqueue.store import whole_files

from ..conftest import ids, operations


def taken_whole(sq: Queue, n: int = 5, **options: Any) -> tuple[Tube, int]:
    """A tube whose ``n`` tasks are all taken by one take: the take rewrote the
    file holding them, so it now holds only them, all taken."""
    t = sq.create_tube("acks", "fifottl", **{"change_feed": True, **options})
    t.put([{"n": i} for i in range(n)])
    assert len(ids(t.take(n))) == n
    return t, t.context.layout.latest_version(t.context.layout.tasks("acks"))


@pytest.mark.parametrize(("run_rows", "files"), [
    (ingesting.INGEST_RUN_ROWS, [(0, 2, 3), (3, 5, 3), (6, 7, 2)]),
    (4, [(0, 2, 3), (3, 3, 1), (4, 6, 3), (7, 7, 1)]),
], ids=["one writer", "a writer per run"])
def test_an_ingest_writes_runs_of_ids_so_a_take_of_whole_runs_acks_whole(
        sq: Queue, monkeypatch: pytest.MonkeyPatch, run_rows: int,
        files: list[tuple[int, int, int]]) -> None:
    """Puts in several inbox files are ingested in id order: a writer per run of
    consecutive put files of at least INGEST_RUN_ROWS tasks (one writer for
    fewer), each writing files of TASK_FILE_ROWS consecutive ids from its run's
    first. Files follow one another in id order, so a take of six leaves files
    of its tasks only, and its ack removes them without a MERGE."""
    monkeypatch.setattr(store.schema, "TASK_FILE_ROWS", 3)
    monkeypatch.setattr(store.schema, "FEW_FILES", 0)  # statistics even for a few files
    monkeypatch.setattr(ingesting, "INGEST_RUN_ROWS", run_rows)
    name = f"runs{run_rows}"
    t = sq.create_tube(name, "fifottl")
    for _ in range(2):
        t.put([{"n": i} for i in range(4)])
    ingest(t.context)
    path = t.context.layout.tasks(name)
    assert sorted((f["min_task_id"], f["max_task_id"], f["rows"])
                  for f in t.context.layout.file_stats(path) if f["min_task_id"] >= 0) == files
    batch = ids(t.take(6))
    assert batch == list(range(6))
    before = t.context.layout.latest_version(path)
    t.ack(batch)
    assert operations(t, before) == [("DELETE", "ack")]
    assert ids(t.take(5)) == [6, 7]


def test_an_ack_of_whole_files_removes_them_without_a_merge(sq: Queue,
                                                            spark: SparkSession) -> None:
    t, before = taken_whole(sq)
    result = t.ack([0, 1, 2, 3, 4])
    assert operations(t, before) == [("DELETE", "ack")]
    assert sorted((r["task_id"], r["status"], r["data"]["n"]) for r in result.collect()) == [
        (i, "done", i) for i in range(5)]
    assert t.peek([0, 1, 2, 3, 4]).count() == 0, "the tasks left the tube"
    stats = t.statistics()
    assert stats["calls"]["ack"] == 5 and stats["tasks"]["done"] == 5
    assert stats["tasks"]["total"] == 0
    feed = (spark.read.format("delta").option("readChangeFeed", "true")
            .option("startingVersion", before + 1).load(t.context.layout.tasks("acks"))
            .where("task_id >= 0"))
    assert sorted((r["task_id"], r["_change_type"]) for r in feed.collect()) == [
        (i, "delete") for i in range(5)], "the change feed reads removed files as deletes"


def test_an_ack_of_the_take_result_dataframe_takes_the_same_path(sq: Queue) -> None:
    t = sq.create_tube("acks", "fifottl")
    t.put([{"n": i} for i in range(4)])
    batch = t.take(4)
    before = t.context.layout.latest_version(t.context.layout.tasks("acks"))
    assert ids(t.ack(batch)) == [0, 1, 2, 3]
    assert operations(t, before) == [("DELETE", "ack")]


def test_part_of_a_file_goes_through_the_merge(sq: Queue) -> None:
    t, before = taken_whole(sq)
    assert ids(t.ack([1, 3])) == [1, 3]
    assert operations(t, before)[0][0] == "MERGE"
    assert sorted(r["task_id"] for r in t.tasks_by_state("taken").collect()) == [0, 2, 4]


def test_doubtful_acks_get_the_merges_error_and_change_nothing(sq: Queue,
                                                               clock: FakeClock) -> None:
    t, before = taken_whole(sq, ttr=30)
    with pytest.raises(NotOwner):
        t.ack([0, 1, 2, 3, 4], owner="someone-else")
    with pytest.raises(TaskNotFound):
        t.ack([0, 1, 2, 3, 4, 5])
    clock.advance(31)
    with pytest.raises(InvalidState):
        t.ack([0, 1, 2, 3, 4])
    assert t.context.layout.latest_version(t.context.layout.tasks("acks")) == before


def stats(lo: int, hi: int, owner: str = "me", status: str = "taken",
          lease_end: float = 100.0, rows: int | None = None) -> dict[str, Any]:
    return {"rows": hi - lo + 1 if rows is None else rows, "min_task_id": lo, "max_task_id": hi,
            "min_status": status, "max_status": status, "status_nulls": 0,
            "min_owner": owner, "max_owner": owner, "owner_nulls": 0,
            "min_lease_end": lease_end, "min_ttl_end": 1e9, "max_ttl_end": 1e9,
            "ttl_end_nulls": 0, "size": 1}


def test_whole_files_takes_only_files_that_are_exactly_the_ids() -> None:
    files = {"a": stats(0, 9), "b": stats(10, 19), "c": stats(20, 29)}
    assert whole_files(files, list(range(20)), "me", 50.0) == ["a", "b"]
    assert whole_files(files, list(range(0, 10)) + list(range(20, 30)), "me", 50.0) == ["a", "c"]
    assert whole_files(files, list(range(15)), "me", 50.0) is None, "b only in part"
    assert whole_files(files, list(range(11)), "me", 50.0) is None
    assert whole_files(files, list(range(10)) + [40], "me", 50.0) is None, "40 is in no file"
    assert whole_files(files, list(range(10)), "you", 50.0) is None
    assert whole_files(files, list(range(10)), "me", 100.0) is None, "leases end at 100"
    # a MERGE writes rows to files by hash: files interleave ids, each within a run of ids
    interleaved = {"a": stats(0, 9, rows=5), "b": stats(1, 8, rows=5)}
    assert whole_files(interleaved, list(range(10)), "me", 50.0) == ["a", "b"]
    assert whole_files({"a": stats(0, 9, rows=5)}, list(range(10)), "me", 50.0) is None, \
        "five of the ids are in no file"
    assert whole_files({"a": stats(0, 9, status="ready")}, list(range(10)), "me", 50.0) is None
    mixed = {"a": {**stats(0, 9), "min_status": "ready"}}
    assert whole_files(mixed, list(range(10)), "me", 50.0) is None
    long_owner = "o" * 40  # Delta keeps a 32-character prefix in statistics
    cut = {"a": {**stats(0, 9), "min_owner": long_owner[:32], "max_owner": long_owner[:32] + "~"}}
    assert whole_files(cut, list(range(10)), long_owner, 50.0) is None


def stats_of(table: str) -> list[dict[str, Any]]:
    """The statistics of every file the Delta log at ``table`` added."""
    out = []
    for f in (Path(table) / "_delta_log").glob("*.json"):
        for line in f.read_text().splitlines():
            add = json.loads(line).get("add")
            if add and add.get("stats"):
                out.append(json.loads(add["stats"]))
    return out


def test_tables_keep_the_statistics_that_are_read(sq: Queue) -> None:
    """The tasks table keeps per-file statistics of STATS_COLUMNS only (what the
    file statistics above read, and what operations filter on), not of the
    payload, tokens or counters; the inbox keeps row counts only (ids count
    rows; nothing filters it). Every write would pay for the others."""
    t, _ = taken_whole(sq)
    kept = {col for stats in stats_of(t.context.layout.tasks(t.name)) for col in stats["nullCount"]}
    assert kept == set(store.STATS_COLUMNS)
    assert {col for _, col in store.FILE_STATS.values()} <= kept
    inbox = stats_of(t.context.layout.inbox(t.name))
    assert inbox and all(s["numRecords"] and not s.get("minValues") for s in inbox)


def test_results_read_the_table_when_a_commit_carries_deletion_vectors(
        sq: Queue, spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    """sparkqueue makes tasks tables without deletion vectors; one turned on by hand
    has files whose rows are not all theirs. A result is then read from the
    table at its commit's version, not from the files the commit names."""
    t, _ = taken_whole(sq, n=6)
    path = t.context.layout.tasks(t.name)
    spark.sql(f"ALTER TABLE delta.`{path}` "
              "SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    read_table: list[int] = []
    files_of = store.Layout.commit_files

    def spied(self: store.Layout, table: str, version: int) -> Any:
        found = files_of(self, table, version)
        if found is None:
            read_table.append(version)
        return found

    monkeypatch.setattr(store.Layout, "commit_files", spied)
    acked = t.ack([1, 3])  # part of a file: a MERGE that marks its rows deleted
    released = t.release([0, 2])
    assert read_table, "a commit with deletion vectors sends the read to the table"
    assert sorted((r["task_id"], r["status"]) for r in acked.collect()) == [
        (1, "done"), (3, "done")]
    assert sorted((r["task_id"], r["status"]) for r in released.collect()) == [
        (0, "ready"), (2, "ready")]
    assert sorted((r["task_id"], r["status"]) for r in t.peek(list(range(6))).collect()) == [
        (0, "ready"), (2, "ready"), (4, "taken"), (5, "taken")]
