"""A take of puts not yet ingested when the tasks table holds no ready task:
the ingest and the lease are one commit (``ingest+take``).

It means what an ingest followed by a take means: each task once, busy
sub-queues passed over, calls counted, the change feed showing the put and
the take. A commit another process made meanwhile sends the take the usual
way (ingest, then MERGE), and an ingest from the same cursor is skipped.
"""

from __future__ import annotations

from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import sparkqueue
from sparkqueue import FakeClock, Queue, Tube, store
from sparkqueue.engine import fresh
from sparkqueue.engine import ingest as ingesting
from sparkqueue.engine import put as putting
from sparkqueue.engine.ingest import ingest, pending_rows
from sparkqueue.store.portable import AppendTransaction
from sparkqueue.store.txn import DeltaTransaction

from ..conftest import commit_infos, ids, known_ids, operations


def primed(sq: Queue, name: str, type_name: str, **options: Any) -> Tube:
    """A tube that has seen one put, take and ack: its tasks table knows the payload
    and holds no task (a consumer that keeps up with its producers)."""
    t = sq.create_tube(name, type_name, **{"change_feed": True, **options})
    sub_queue: dict[str, Any] = {"utube": "first"} if t.driver.uses_utube else {}
    t.put({"n": -1}, **sub_queue)
    t.ack(t.take(1))
    return t


def tasks_version(t: Tube) -> int:
    return t.context.layout.latest_version(t.context.layout.tasks(t.name))


@pytest.mark.parametrize("type_name", ["fifottl", "utube"])
def test_a_take_of_new_puts_ingests_and_leases_in_one_commit(
        sq: Queue, spark: SparkSession, type_name: str) -> None:
    t = primed(sq, "fresh", type_name)
    before = tasks_version(t)
    utube = type_name == "utube"
    put_opts: dict[str, Any] = {"utube": "q"} if utube else {}
    take_opts: dict[str, Any] = {"window": 2} if utube else {}
    t.put([{"n": i} for i in range(3)], **put_opts)
    got = t.take(2, **take_opts)
    assert operations(t, before) == [("WRITE", "ingest+take")], "one commit, no MERGE"
    assert known_ids(t, got) == [1, 2], "a run of ids: known from the commit, not read"
    expected = spark.createDataFrame([(1, "taken", "consumer-a", 1), (2, "taken", "consumer-a", 1)],
                                     "task_id long, status string, owner string, taken_count long")
    assert_df_equality(got.select(*expected.columns), expected, ignore_row_order=True,
                       ignore_nullable=True)
    assert [r["status"] for r in t.peek([1, 2, 3]).orderBy("task_id").collect()] == [
        "taken", "taken", "ready"]
    stats = t.statistics()
    assert stats["calls"]["take"] == 3 and stats["calls"]["put"] == 4
    assert stats["tasks"]["taken"] == 2 and stats["tasks"]["ready"] == 1

    query = (t.changes(starting_version=before + 1).writeStream.format("memory")
             .queryName(f"fresh_{type_name}").trigger(availableNow=True).start())
    query.awaitTermination()
    feed = spark.table(f"fresh_{type_name}").select("task_id", "status", "event")
    # a fifo take of new puts ingests the tasks it leases alone (the first ids): task 3
    # stays in the inbox, and its put comes in the feed when it is ingested
    rest = [(3, "ready", "put")] if utube else []
    shown = spark.createDataFrame(
        [(1, "ready", "put"), (2, "ready", "put"), (1, "taken", "take"), (2, "taken", "take"),
         *rest], feed.schema)
    assert_df_equality(feed, shown, ignore_row_order=True, ignore_nullable=True)
    raw = (spark.read.format("delta").option("readChangeFeed", "true")
           .option("startingVersion", before + 1).load(t.context.layout.tasks(t.name)))
    assert sorted((r["task_id"], r["_change_type"]) for r in raw.collect()) == [
        (1, "insert"), (1, "update_postimage"), (2, "insert"), (2, "update_postimage"),
        *[(3, "insert")] * utube], "no pre-image of a task put in the same commit"
    t.ack(got)
    assert ids(t.take(5)) == [3], "the rest is ingested once"


def test_a_fresh_take_passes_over_sub_queues_leased_in_the_tasks_table(sq: Queue) -> None:
    t = primed(sq, "busy", "utube")
    t.put({"n": 0}, utube="x")
    assert ids(t.take(1)) == [1], "x is now leased, and the tasks table holds nothing ready"
    before = tasks_version(t)
    t.put([{"n": 1}], utube="x")
    t.put([{"n": 2}], utube="y")
    assert ids(t.take(5)) == [3], "x's next task waits for its lease"
    assert operations(t, before) == [("WRITE", "ingest+take")]
    t.ack(1)
    assert ids(t.take(5)) == [2]


def test_delayed_new_puts_are_ingested_and_taken_once_their_delay_passes(
        sq: Queue, clock: FakeClock) -> None:
    t = primed(sq, "later", "fifottl")
    before = tasks_version(t)
    t.put({"n": 0}, delay=10)
    assert ids(t.take(1)) == [], "nothing ready yet"
    assert operations(t, before) == [("WRITE", "ingest+take")], "ingested, none leased"
    clock.advance(10)
    assert ids(t.take(1)) == [1]
    assert t.statistics()["calls"]["delay"] == 1


def portable_queue(sq: Queue) -> Queue:
    return sparkqueue.connect(sq.spark, sq.root, owner=sq.owner, clock=sq.clock,
                              engine="portable")


def test_the_portable_engines_take_of_new_puts_is_one_append(sq: Queue) -> None:
    """Public SQL alone: the puts the take leases are appended leased, with the
    ingest's transaction id, in one commit (no UPDATE rewrites them)."""
    t = primed(portable_queue(sq), "append", "fifottl", change_feed=False)
    before = tasks_version(t)
    t.put([{"n": i} for i in range(5)])
    assert t.explain_take(2)["strategy"] == "new-puts"
    got = t.take(2)
    assert operations(t, before) == [("WRITE", "ingest+take")], "one append, no UPDATE"
    assert commit_infos(t)[before + 1]["tag"]["plan"] == "new-puts"
    assert known_ids(t, got) == [1, 2] == ids(got)
    assert {r["status"] for r in got.collect()} == {"taken"}
    t.ack(got)
    assert ids(t.take(5)) == [3, 4, 5], "the rest ingested once"
    assert t.statistics()["calls"]["take"] == 6


def test_the_portable_take_of_new_puts_keeps_a_change_feed_whole(sq: Queue) -> None:
    """An append writes no change feed rows of its own: where the tube keeps a feed
    the take goes the usual way, so its feed shows each take."""
    t = primed(portable_queue(sq), "fed", "fifottl")
    before = tasks_version(t)
    t.put([{"n": 0}, {"n": 1}])
    assert ids(t.take(1)) == [1]
    assert [op for _, op in operations(t, before)] == ["ingest", "take"]


@pytest.mark.parametrize("engine, transaction", [("accelerated", DeltaTransaction),
                                                   ("portable", AppendTransaction)])
def test_a_fresh_take_that_meets_another_ingest_goes_the_usual_way(
        sq: Queue, spark: SparkSession, monkeypatch: pytest.MonkeyPatch, engine: str,
        transaction: Any) -> None:
    """Another process ingests from the take's cursor between its look and its
    commit: the accelerated commit conflicts (it read the whole table), Delta
    skips the portable append (the ingest's transaction id). Either way the take
    leases the tasks that ingest wrote; none is ingested twice."""
    t = primed(sq if engine == "accelerated" else portable_queue(sq), "race", "fifottl",
               change_feed=False)
    before = tasks_version(t)
    t.put([{"n": i} for i in range(3)])
    other = sparkqueue.connect(spark, sq.root, owner="consumer-b", clock=sq.clock,
                               engine=engine).tube("race")
    commit = transaction.ingest
    raced: list[int] = []

    def ingest_first(self: Any, *args: Any, **kwargs: Any) -> tuple[int, Any]:
        if not raced:
            ingest(other.context)
            raced.append(1)
        return commit(self, *args, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(transaction, "ingest", ingest_first)
    assert ids(t.take(2)) == [1, 2]
    assert [op for _, op in operations(t, before)] == ["ingest", "take"]
    rows = t.context.layout.read(t.context.layout.tasks("race")).where("task_id >= 0")
    assert sorted(r["task_id"] for r in rows.collect()) == [1, 2, 3], "each task once"


def test_a_view_of_new_puts_is_whole_when_a_take_ingests_them_meanwhile(
        sq: Queue, spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another consumer's take of new puts commits after peek read the cursor and
    before its Spark job runs: each task shows once, as the version the view
    read holds it (the tasks table is read at the cursor's version; read at
    the newest, the two it leased showed twice, taken and ready)."""
    t = primed(sq, "torn", "fifottl")
    t.put([{"n": i} for i in range(3)])
    other = sparkqueue.connect(spark, sq.root, owner="consumer-b", clock=sq.clock).tube("torn")
    layout_type = type(t.context.layout)
    cursor = layout_type.cursor
    raced: list[list[int]] = []

    def take_meanwhile(self: Any, tube: str, at: int | None = None) -> store.Cursor:
        found = cursor(self, tube, at)
        if not raced:
            raced.append([])
            raced[0] = ids(other.take(2))
        return found

    monkeypatch.setattr(layout_type, "cursor", take_meanwhile)
    view = t.peek([1, 2, 3])
    assert raced == [[1, 2]], "the other take committed while peek read"
    assert sorted((r["task_id"], r["status"]) for r in view.collect()) == [
        (1, "ready"), (2, "ready"), (3, "ready")]
    assert sorted((r["task_id"], r["status"]) for r in t.peek([1, 2, 3]).collect()) == [
        (1, "taken"), (2, "taken"), (3, "ready")]


def test_an_ingest_from_the_cursor_a_fresh_take_ingested_from_is_skipped(
        sq: Queue, spark: SparkSession) -> None:
    """The commit records the ingest's transaction id as an ingest does: a late
    ingest from the same cursor appends nothing."""
    t = primed(sq, "late", "fifottl")
    t.put([{"n": 0}, {"n": 1}])
    layout = t.context.layout
    start, upto = layout.cursor("late"), layout.latest_version(layout.inbox("late"))
    late = pending_rows(t.context, spark, start, upto)
    assert late is not None
    before = tasks_version(t)
    assert ids(t.take(1)) == [1]
    assert operations(t, before) == [("WRITE", "ingest+take")]
    after = tasks_version(t)
    layout.write_marker("late", start, store.Cursor(upto, 3), [late])
    assert tasks_version(t) == after, "the late ingest was skipped"
    assert ids(t.take(5)) == [2]


def test_a_fresh_take_writes_runs_of_ids_so_its_ack_removes_whole_files(
        sq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """As an ingest does: files of TASK_FILE_ROWS consecutive ids from the first,
    the change feed's rows in files of their own; a take of whole runs is then
    acked by removing its files."""
    monkeypatch.setattr(store.schema, "TASK_FILE_ROWS", 3)
    monkeypatch.setattr(store.schema, "FEW_FILES", 0)
    t = primed(sq, "runs", "fifottl")
    for _ in range(2):
        t.put([{"n": i} for i in range(4)])
    before = tasks_version(t)
    assert ids(t.take(6)) == list(range(1, 7))
    path = t.context.layout.tasks("runs")
    runs = sorted((f["min_task_id"], f["max_task_id"], f["min_status"], f["max_status"])
                  for f in t.context.layout.file_stats(path) if f["min_task_id"] >= 0)
    assert runs == [(1, 3, "taken", "taken"), (4, 6, "taken", "taken")], "7 and 8 wait in the inbox"
    t.ack(list(range(1, 7)))
    assert operations(t, before) == [("WRITE", "ingest+take"), ("DELETE", "ack")]


def test_a_new_tubes_first_take_adds_the_payload_column_in_its_one_commit(
        sq: Queue, spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tube's tasks table whose first put did not give it the payload column (a
    crash between the two commits, a tube of an older package) has none until
    its first ingest. Its first take adds it in the ingest+take commit, with
    the schema an ingest's append gives it (``mergeSchema``), and writes runs
    of puts side by side, each file holding consecutive ids, as an ingest
    does, so that its ack removes whole files."""
    monkeypatch.setattr(putting, "give_payload_column", lambda ctx, payload: None)
    monkeypatch.setattr(ingesting, "INGEST_RUN_ROWS", 2)
    monkeypatch.setattr(store.schema, "TASK_FILE_ROWS", 2)
    monkeypatch.setattr(store.schema, "FEW_FILES", 0)
    fresh, alone = (sq.create_tube(name, "fifottl", change_feed=True)
                    for name in ("first", "alone"))
    for t in (fresh, alone):
        t.put([{"n": 1, "s": "x"}, {"n": 2, "s": None}])
        t.put([{"n": i, "s": "y"} for i in range(3, 6)])
    assert ids(fresh.take(3)) == [0, 1, 2]
    assert operations(fresh, 0) == [("WRITE", "ingest+take")], "one commit, no ingest before"
    ingest(alone.context)
    assert operations(alone, 0) == [("WRITE", "ingest")]
    layout = fresh.context.layout

    def schema(t: Tube) -> Any:
        return spark.read.format("delta").load(layout.tasks(t.name)).schema

    assert schema(fresh) == schema(alone)
    files = sorted((f["min_task_id"], f["max_task_id"]) for f in layout.file_stats(
        layout.tasks("first")) if f["min_task_id"] >= 0)
    assert files == [(0, 1), (2, 2)], "a run per put; 3 and 4 wait in the inbox"
    assert [r["data"]["s"] for r in fresh.peek([0, 1, 2, 3, 4]).orderBy("task_id").collect()] == [
        "x", None, "y", "y", "y"]
    fresh.ack([0, 1, 2])
    assert operations(fresh, 1) == [("DELETE", "ack")], "whole files: no MERGE"
    assert ids(fresh.take(5)) == [3, 4]


def test_puts_that_agree_on_their_options_are_taken_in_id_order_without_a_choice(
        sq: Queue, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """A head-only take among puts that each gave one priority (the same), no
    delay and no per-row option leases their lowest ids, known from the put
    tags: the driver's choice is not run. Puts that differ, or whose ttl ended,
    are chosen from as before."""
    choices: list[int] = []
    original = fresh.choice

    def counted(*args: Any, **kwargs: Any) -> Any:
        choices.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(fresh, "choice", counted)
    t = primed(sq, "agree", "fifottl")
    before = tasks_version(t)
    t.put([{"n": i} for i in range(3)], ttl=100)
    t.put([{"n": i} for i in range(3, 5)])
    got = t.take(4)
    assert (ids(got), choices) == ([1, 2, 3, 4], []), "the first ids, no choice job"
    assert known_ids(t, got) == [1, 2, 3, 4]
    assert operations(t, before) == [("WRITE", "ingest+take")]
    t.ack(got)
    assert ids(t.take(5)) == [5]

    t.put({"n": 6})
    t.urgent({"n": 7})
    assert (ids(t.take(1)), len(choices)) == ([7], 1), "an urgent put: chosen, first"
    assert ids(t.take(1)) == [6]
    t.put({"n": 8}, pri=F.lit(0))
    assert (ids(t.take(5)), len(choices)) == ([8], 2), "a per-row option: chosen"
    t.put({"n": 9}, ttl=10)
    clock.advance(20)
    t.put({"n": 10})
    assert (ids(t.take(5)), len(choices)) == ([10], 3), "9's ttl has ended: chosen"


def test_a_file_of_tasks_whose_ttl_ended_leaves_the_next_take_one_commit(
        sq: Queue, clock: FakeClock) -> None:
    """Expired tasks the sweeper has not purged yet are not ready: their file's
    statistics (the latest ttl_end passed) say so, and a take of new puts
    stays the one commit."""
    t = primed(sq, "ended", "fifottl")
    t.put([{"n": 0}, {"n": 1}], ttl=10)
    ingest(t.context)
    clock.advance(20)
    before = tasks_version(t)
    t.put({"n": 2})
    assert ids(t.take(5)) == [3]
    assert operations(t, before) == [("WRITE", "ingest+take")]
    assert t.statistics()["tasks"]["ready"] == 0
