"""The accelerator's take of the head files: when file statistics show which data
files hold the lowest ready tasks, one commit rewrites them, the leased tasks
into files of their own (which their ack then removes whole, reading no data)
and the others as they were. Same answers as the UPDATE or MERGE: the lowest
tasks by priority and order, counted as takes, never leased twice.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from sparkqueue import Consumer, Queue, QueueError, Tube, store
from sparkqueue.engine import settle
from sparkqueue.engine import take as taking
from sparkqueue.engine.ingest import ingest
from sparkqueue.store.paths import writer_session

from ..conftest import ids, known_ids, operations
from .test_take_range import jobs_when_called


@pytest.fixture(autouse=True)
def with_statistics(monkeypatch: pytest.MonkeyPatch) -> None:
    """File statistics even for a table of a few files."""
    monkeypatch.setattr(store.schema, "FEW_FILES", 0)


def ingested(sq: Queue, name: str, rows: list[dict[str, Any]], **options: Any) -> Tube:
    """A fifottl tube with ``rows`` put and ingested (so its first take is not an
    ingest's), and its file statistics read once."""
    t = sq.create_tube(name, "fifottl", **options)
    t.put(rows)
    ingest(t.context)
    layout = t.context.layout
    layout.file_stats(layout.tasks(name))
    return t


def files_of(t: Tube) -> list[tuple[str, str, int, int]]:
    """The tasks table's data files: (min and max status, min and max task id)."""
    layout = t.context.layout
    path = layout.tasks(t.name)
    files = layout.files_at(path, layout.latest_version(path)) or {}
    return sorted((f["min_status"], f["max_status"], f["min_task_id"], f["max_task_id"])
                  for f in files.values() if f["min_task_id"] >= 0)


def test_leased_tasks_get_files_of_their_own_which_their_ack_removes_whole(
        sq: Queue) -> None:
    t = ingested(sq, "own", [{"n": i} for i in range(10)])
    path = t.context.layout.tasks("own")
    before = t.context.layout.latest_version(path)
    batch = t.take(3)
    assert sorted((r["task_id"], r["status"], r["data"]["n"]) for r in batch.collect()) == [
        (0, "taken", 0), (1, "taken", 1), (2, "taken", 2)]
    assert operations(t, before) == [("UPDATE", "take")]
    assert files_of(t) == [("ready", "ready", 3, 9), ("taken", "taken", 0, 2)]
    assert t.meta(1)["owner"] == "consumer-a"

    before = t.context.layout.latest_version(path)
    assert ids(t.ack(batch)) == [0, 1, 2]
    assert operations(t, before) == [("DELETE", "ack")]
    assert ids(t.take(1)) == [3]
    stats = t.statistics()
    assert stats["calls"]["take"] == 4 and stats["calls"]["ack"] == 3
    assert stats["tasks"]["ready"] == 6 and stats["tasks"]["taken"] == 1


def test_a_take_cuts_the_ready_rows_it_rewrites_into_files_of_its_size(
        sq: Queue, spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    t = ingested(sq, "cut", [{"n": i} for i in range(2500)])  # one file
    assert store.TAKE_FILE_ROWS == 1000
    first = t.take(1000)
    assert ids(first) == list(range(1000))
    assert known_ids(t, first) == list(range(1000)), "chosen within the file; as written"
    assert files_of(t) == [("ready", "ready", 1000, 1999), ("ready", "ready", 2000, 2499),
                           ("taken", "taken", 0, 999)]
    whole = t.take(1000)  # a whole file: nothing else rewritten, its ids known from statistics
    assert known_ids(t, whole) == list(range(1000, 2000)) == ids(whole)
    assert known_ids(t, whole.where("task_id < 1500")) is None, "another DataFrame"
    assert files_of(t) == [("ready", "ready", 2000, 2499), ("taken", "taken", 0, 999),
                           ("taken", "taken", 1000, 1999)]
    # the size was the take's write's alone: the writer session is as it was
    assert writer_session(spark).conf.get("spark.sql.files.maxRecordsPerFile", None) is None
    jobs, before = jobs_when_called(spark, monkeypatch, "on_whole_files", settle)
    acked = t.ack(whole)
    assert jobs == [before], "the ack's ids were the take's: no Spark job read them"
    assert ids(acked) == list(range(1000, 2000))


def test_the_take_chooses_by_priority_then_order_among_the_files_rows(sq: Queue) -> None:
    t = sq.create_tube("pri", "fifottl")
    for pri in [3, 1, 2, 0, 5]:
        t.put({"n": pri}, pri=pri)
    ingest(t.context)  # one file of all five, priorities mixed
    t.context.layout.file_stats(t.context.layout.tasks("pri"))
    two = t.take(2)
    assert [r["data"]["n"] for r in two.orderBy("pri").collect()] == [0, 1]
    assert known_ids(t, two) is None, "ids 1 and 3: not a run, so read, not assumed"
    assert ids(t.ack(two)) == [1, 3]
    assert [r["data"]["n"] for r in t.take(1).collect()] == [2]


def test_a_requeued_task_is_taken_after_the_tasks_ahead_of_it(sq: Queue) -> None:
    t = ingested(sq, "requeue", [{"n": i} for i in range(3)])
    t.requeue(t.take(1))  # task 0 moves to the end
    assert ids(t.take(1)) == [1]
    assert ids(t.take(1)) == [2]
    assert ids(t.take(1)) == [0]


def before_its_commit(t: Tube, monkeypatch: pytest.MonkeyPatch,
                      meanwhile: Callable[[], None]) -> list[int]:
    """Run ``meanwhile`` (another process's commit) once, between the next head-file
    take's read of its files and its commit; the head-file commits tried since,
    counted as they start (``meanwhile``'s own among them)."""
    store_ = t.context.layout.store  # this Queue's: another's commits are not counted
    begin = store_.begin
    commits: list[int] = []

    def counted(path: str, **kwargs: Any) -> Any:
        txn = begin(path, **kwargs)
        replace = txn.replace

        def replacing(*args: Any, **kw: Any) -> Any:
            commits.append(len(commits))
            if len(commits) == 1:
                meanwhile()
            return replace(*args, **kw)

        txn.replace = replacing  # type: ignore[method-assign]
        return txn

    monkeypatch.setattr(store_, "begin", counted)
    return commits


def test_a_take_whose_files_a_concurrent_take_changed_takes_the_next_head_leasing_none_twice(
        sq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    t = ingested(sq, "race", [{"n": i} for i in range(5)])
    stolen: list[list[int]] = []
    commits = before_its_commit(
        t, monkeypatch, lambda: stolen.append(ids(t.take(1, owner="consumer-b"))))
    retried = t.context.conflicts
    assert ids(t.take(2)) == [1, 2], "after the conflict, the next head"
    assert stolen == [[0]]
    assert t.meta(0)["owner"] == "consumer-b" and t.meta(1)["owner"] == "consumer-a"
    assert t.context.conflicts == retried + 1, "the conflict is retried and counted"
    assert len(commits) == 3, "a's lost try, b's take, a's head-file take again: no UPDATE"


def test_a_take_whose_commit_met_a_concurrent_ingest_tries_again_leasing_the_head_once(
        sq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    t = ingested(sq, "adding", [{"n": i} for i in range(3)])
    added: list[int] = []

    def put_and_ingest() -> None:  # a producer's put, ingested
        added.append(t.put([{"n": 3}]).count())
        ingest(t.context)

    before_its_commit(t, monkeypatch, put_and_ingest)
    retried = t.context.conflicts
    assert ids(t.take(2)) == [0, 1]
    assert added == [1] and t.context.conflicts == retried + 1, \
        "Delta checks a table without partitions as read whole: the ingest's files conflict"
    assert ids(t.take(5)) == [2, 3]


def test_a_consumers_take_removes_its_previous_batch_in_the_same_commit(sq: Queue) -> None:
    t = ingested(sq, "riding", [{"n": i} for i in range(6)])
    who = t.context.who(None)
    assert ids(t.take(3)) == [0, 1, 2]
    path = t.context.layout.tasks("riding")
    before = t.context.layout.latest_version(path)
    assert ids(taking.take(t.context, 3, 0.0, who, 1, acking=[0, 1, 2])) == [3, 4, 5]
    assert operations(t, before) == [("UPDATE", "take+ack")]
    assert t.peek([0, 1, 2]).count() == 0, "acked in the same commit"
    stats = t.statistics()
    assert stats["calls"]["take"] == 6 and stats["calls"]["ack"] == 3

    t.put([{"n": 6}, {"n": 7}])
    ingest(t.context)
    with pytest.raises(QueueError, match="6"):  # not a file of the acker's: the MERGE says
        taking.take(t.context, 2, 0.0, who, 1, acking=[6])
    assert t.meta(6)["status"] == "ready" and t.meta(7)["status"] == "ready"


def test_a_consumer_pays_one_commit_a_batch_its_acks_riding_with_the_next_take(
        sq: Queue) -> None:
    t = ingested(sq, "loop", [{"n": i} for i in range(6)])
    path = t.context.layout.tasks("loop")
    before = t.context.layout.latest_version(path)
    seen: list[list[int]] = []
    progress = Consumer(t, lambda batch: seen.append(ids(batch)), batch_size=3,
                        take_timeout=0, idle_timeout=0).run()
    assert seen == [[0, 1, 2], [3, 4, 5]] and progress.done == 6
    # the last batch's acks rode on no take: nothing was left to take
    assert operations(t, before) == [("UPDATE", "take"), ("UPDATE", "take+ack"),
                                     ("DELETE", "ack")]
    assert t.statistics()["calls"]["ack"] == 6


def test_a_tube_that_keeps_a_change_feed_takes_by_update(sq: Queue,
                                                         spark: SparkSession) -> None:
    t = ingested(sq, "feed", [{"n": i} for i in range(4)], change_feed=True)
    path = t.context.layout.tasks("feed")
    before = t.context.layout.latest_version(path)
    assert ids(t.take(1)) == [0]
    feed = (spark.read.format("delta").option("readChangeFeed", "true")
            .option("startingVersion", before + 1).load(path)
            .where("_change_type = 'update_postimage'"))
    assert [(r["task_id"], r["status"]) for r in feed.collect()] == [(0, "taken")]


def test_a_file_with_a_deletion_vector_is_not_taken_from_its_statistics(
        sq: Queue, spark: SparkSession) -> None:
    """A deletion vector (a table turned to them by hand) leaves a file's statistics
    counting rows it deleted, and its Parquet still holds them: such a file
    is not chosen from statistics, or a buried task would be leased too."""
    t = ingested(sq, "vectors", [{"n": i} for i in range(6)])
    path = t.context.layout.tasks("vectors")
    spark.sql(f"ALTER TABLE delta.`{path}` "
              "SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    t.bury(2)  # a MERGE that marks the ready row deleted in its file
    assert ids(t.take(10)) == [0, 1, 3, 4, 5]
    assert t.meta(2)["status"] == "buried"


def test_a_deletion_vector_leaves_statistics_unknown_from_a_checkpoint_and_a_state_read(
        sq: Queue, spark: SparkSession) -> None:
    """The other two ways file statistics are read, besides the commits: a checkpoint
    (the portable engine's, ``checkpoint_stats``) and the snapshot's state (the
    accelerator's, ``load_file_stats``). Each keeps a vectored file's rows unknown."""
    t = ingested(sq, "checkpointed", [{"n": i} for i in range(6)])
    path = t.context.layout.tasks("checkpointed")
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES "
              "('delta.enableDeletionVectors' = 'true', 'delta.checkpointInterval' = '1')")
    t.bury(2)  # a MERGE that marks the ready row deleted in its file, then a checkpoint
    log = t.context.layout
    assert log.engine == "accelerated"
    latest = log.latest_version(path)
    from_checkpoint = log.checkpoint_stats(path, latest)
    from_state = log.store.load_file_stats(path, latest)
    assert from_checkpoint is not None and from_state is not None
    assert from_checkpoint[0] == from_state[0] == latest
    for files in (from_checkpoint[1], from_state[1]):
        vectored = [f for f in files.values() if f["rows"] is None]
        assert len(vectored) == 1 and vectored[0]["min_task_id"] == 0, \
            "the file of tasks 0 to 5, one of them deleted by its vector"


def test_task_files_are_written_without_parquet_dictionaries(sq: Queue) -> None:
    """Task ids and many payloads are unique per row: a dictionary as big as the
    column is work for nothing, so the tube's writes (the one-commit take of
    new puts, an ingest, Delta's UPDATE of a take) use plain encodings."""
    t = sq.create_tube("plain", "fifottl")
    t.put([{"n": i, "s": f"item {i}"} for i in range(4)])
    assert ids(t.take(2)) == [0, 1]
    t.put([{"n": i, "s": f"item {i}"} for i in range(4, 8)])
    ingest(t.context)
    assert ids(t.take(3)) == [2, 3, 4]
    folder = Path(t.context.layout.tasks("plain"))
    encodings = {e for f in folder.glob("part-*.parquet")
                 for column in pq.ParquetFile(f).metadata.row_group(0).to_dict()["columns"]
                 for e in column["encodings"]}
    assert operations(t, 0) == [("ADD COLUMNS", "payload"), ("WRITE", "ingest+take"),
                                ("WRITE", "ingest"), ("UPDATE", "take")]
    assert encodings and not any("DICTIONARY" in e for e in encodings), encodings


def test_a_drains_rounds_read_no_table_state_once_its_files_statistics_are_known(
        sq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """A take looks for ended leases at the newest version this process knows,
    its own last commit among them, whose file statistics it holds: no round
    of take and ack loads them from the snapshot's state again (Spark jobs
    each round on a table of 50 files or more, 60 here, whose files Delta's
    checksum file does not list)."""
    monkeypatch.setattr(store.schema, "TASK_FILE_ROWS", 1)
    t = ingested(sq, "rounds", [{"n": i} for i in range(60)])
    store_ = t.context.layout.store
    loads: list[str] = []
    load = store_.load_file_stats

    def counted(path: str, latest: int) -> Any:
        loads.append(path)
        return load(path, latest)

    monkeypatch.setattr(store_, "load_file_stats", counted)
    for first in (0, 3, 6):
        batch = t.take(3)
        assert ids(batch) == [first, first + 1, first + 2]
        assert ids(t.ack(batch)) == [first, first + 1, first + 2]
    assert loads == []
    assert t.statistics()["tasks"]["total"] == 51
