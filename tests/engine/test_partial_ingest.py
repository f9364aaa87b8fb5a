"""A take of new puts ingests the tasks it leases alone: the first ids, when the
puts' tags say they are the ones a fifo takes, however few of the rows of the
put files that hold them they are (here, puts write files of two rows). The rest stay
in the inbox, the cursor counting the rows ingested of the puts after its
version (``Cursor.partial``), until a later take or an ingest moves them, once.
"""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import sparkqueue
from sparkqueue import FakeClock, Queue, Tube, store
from sparkqueue.engine import ops, take
from sparkqueue.engine.ingest import ingest, ingest_for_take
from sparkqueue.store import Layout
from sparkqueue.sweep import purge

from ..conftest import ids, operations
from .test_fresh_take import primed, tasks_version


@pytest.fixture(autouse=True)
def small_inbox_files(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store.schema, "INBOX_FILE_ROWS", 2)


def stored_ids(t: Tube) -> list[int]:
    """The task ids in the tasks table, as stored (a duplicate would show twice)."""
    rows = t.context.layout.read(t.context.layout.tasks(t.name)).where("task_id >= 0")
    return sorted(r["task_id"] for r in rows.select("task_id").collect())


def test_a_take_of_new_puts_ingests_only_the_tasks_it_leases(sq: Queue) -> None:
    t = primed(sq, "part", "fifottl")
    t.put([{"n": i} for i in range(5)])
    t.put([{"n": i} for i in range(5, 8)])
    layout = t.context.layout
    before = tasks_version(t)
    assert ids(t.take(2)) == [1, 2]
    assert operations(t, before) == [("WRITE", "ingest+take")]
    assert stored_ids(t) == [1, 2], "the others wait in the inbox"
    assert layout.cursor("part").partial == 2
    assert [r["status"] for r in t.peek(list(range(1, 9))).orderBy("task_id").collect()] == [
        "taken", "taken", *["ready"] * 6], "tasks in the inbox are seen where they are"
    stats = t.statistics()["tasks"]
    assert (stats["taken"], stats["ready"], stats["total"]) == (2, 6, 8)

    assert ids(t.take(4)) == [3, 4, 5, 6], "the rest of one put and the next one's first"
    assert stored_ids(t) == list(range(1, 7))
    assert ids(t.take(5)) == [7, 8]
    assert stored_ids(t) == list(range(1, 9)), "each task once"
    cursor = layout.cursor("part")
    assert (cursor.partial, cursor.version) == (0, layout.latest_version(layout.inbox("part")))
    assert operations(t, before) == [("WRITE", "ingest+take")] * 3
    t.ack(list(range(1, 9)))
    assert t.statistics()["tasks"]["total"] == 0


def test_an_ingest_after_a_partial_take_moves_the_rest_once(
        sq: Queue, spark: SparkSession) -> None:
    """An ingest from the cursor the take ingested from is skipped, as from any
    cursor left behind; an ingest from the partial cursor moves the rest."""
    t = primed(sq, "rest", "fifottl")
    t.put([{"n": i} for i in range(4)])
    layout = t.context.layout
    start, upto = layout.cursor("rest"), layout.latest_version(layout.inbox("rest"))
    late = t.context.layout.read(layout.tasks("rest")).limit(0)
    assert ids(t.take(1)) == [1]
    after = tasks_version(t)
    layout.write_marker("rest", start, store.Cursor(upto, 5), [late])
    assert tasks_version(t) == after, "the ingest from the earlier cursor was skipped"
    other = sparkqueue.connect(spark, sq.root, owner="consumer-b", clock=sq.clock).tube("rest")
    ingest(other.context)
    assert stored_ids(t) == [1, 2, 3, 4]
    assert layout.cursor("rest") == store.Cursor(upto, 5)
    ingest(t.context)
    assert stored_ids(t) == [1, 2, 3, 4], "nothing left to ingest"
    assert ids(t.take(5)) == [2, 3, 4]


def test_an_ingest_that_loses_to_a_partial_take_ingests_what_it_left(
        sq: Queue, spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another consumer's take ingests the first tasks between an ingest's read of
    the cursor and its append: the append is skipped (its transaction version
    is the take's), and the ingest goes on from the cursor the take left."""
    t = primed(sq, "race", "fifottl")
    t.put([{"n": i} for i in range(3)])
    other = sparkqueue.connect(spark, sq.root, owner="consumer-b", clock=sq.clock).tube("race")
    write = Layout.write_marker
    raced: list[list[int]] = []

    def take_first(self: Layout, *args: Any, **kwargs: Any) -> None:
        if not raced:
            raced.append(ids(other.take(1)))
        write(self, *args, **kwargs)

    monkeypatch.setattr(Layout, "write_marker", take_first)
    before = tasks_version(t)
    ingest(t.context)
    assert raced == [[1]]
    assert [op for _, op in operations(t, before)] == ["ingest+take", "ingest"]
    assert stored_ids(t) == [1, 2, 3], "each task once"
    assert ids(t.take(5)) == [2, 3]


def test_the_cursor_of_a_partial_take_is_kept_in_its_marker(
        sq: Queue, spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the log no longer shows an ingest (retention, or many commits since),
    the newest marker row gives the cursor, its partial rows too."""
    t = primed(sq, "mark", "fifottl")
    t.put([{"n": i} for i in range(4)])
    assert ids(t.take(2)) == [1, 2]
    t.ack([1, 2])
    monkeypatch.setattr(store.schema, "CURSOR_LOOKBACK", 0)
    fresh = sparkqueue.connect(spark, sq.root, owner="consumer-b", clock=sq.clock)
    assert fresh.layout.cursor("mark") == t.context.layout.cursor("mark")
    assert fresh.layout.cursor("mark").partial == 2
    assert ids(fresh.tube("mark").take(5)) == [3, 4]


def test_the_sweeper_keeps_the_inbox_files_a_take_ingested_in_part(
        sq: Queue, spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    """It purges the puts ingested whole, and every cursor marker but the newest
    (each partial take within one put leaves one)."""
    t = primed(sq, "swept", "fifottl")
    t.put([{"n": i} for i in range(4)])
    layout = t.context.layout
    assert ids(t.take(1)) == [1] and ids(t.take(1)) == [2]

    def markers() -> int:
        return layout.read(layout.tasks("swept")).where("task_id < 0").count()

    assert markers() == 3, "the primed tube's ingest, and the two takes'"
    purge(t)
    assert markers() == 1
    assert layout.read(layout.inbox("swept")).count() == 4, "its put is ingested in part"
    monkeypatch.setattr(store.schema, "CURSOR_LOOKBACK", 0)
    fresh = sparkqueue.connect(spark, sq.root, owner="consumer-b", clock=sq.clock)
    assert fresh.layout.cursor("swept") == layout.cursor("swept"), "from the marker kept"
    assert ids(t.take(5)) == [3, 4]
    sq.sweep("swept")
    assert layout.read(layout.inbox("swept")).count() == 0, "all ingested: purged"


def test_a_put_of_files_past_the_inbox_file_size_numbers_rows_in_order(
        sq: Queue, spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    """One writer's rows go into several files (each with a UUID of its own in its
    name): ids follow the order they were written in, not the names' order."""
    t = primed(sq, "order", "fifottl")
    t.put(spark.range(9).coalesce(1).selectExpr("id AS n"))
    layout = t.context.layout
    inbox = layout.inbox("order")
    files = layout.files_at(inbox, layout.latest_version(inbox)) or {}
    assert sorted(f["rows"] for f in files.values()) == [1, 1, 2, 2, 2, 2], (
        "the primed put's file, and one writer's five")
    got = t.take(3)
    assert sorted((r["task_id"], r["data"]["n"]) for r in got.collect()) == [
        (1, 0), (2, 1), (3, 2)]
    rest = t.peek(list(range(4, 10))).collect()
    assert sorted((r["task_id"], r["data"]["n"]) for r in rest) == [(i + 1, i) for i in range(3, 9)]


def test_a_sharded_tube_takes_its_new_puts_in_part_by_shard(sq: Queue) -> None:
    t = sq.create_tube("sharded", "fifottl", shards=2)
    t.put([{"n": i} for i in range(4)])
    first = ids(t.take(1))
    shard = first[0] % 2
    rest = ids(t.take(5))
    assert [i % 2 for i in first + rest] == [shard] * 4, "one shard's tasks"
    assert first + rest == sorted(first + rest), "in id order"


def test_a_consumer_of_new_puts_takes_each_batch_with_the_last_ones_acks(sq: Queue) -> None:
    """Each batch is one commit: it ingests the tasks it leases and removes the
    previous batch's files (whole files of the consumer's leases)."""
    t = primed(sq, "drain", "fifottl", change_feed=False)
    t.put([{"n": i} for i in range(5)])
    before = tasks_version(t)
    seen: list[list[int]] = []
    progress = sparkqueue.Consumer(t, lambda batch: seen.append(ids(batch)), batch_size=2,
                                   take_timeout=0, idle_timeout=0).run()
    assert seen == [[1, 2], [3, 4], [5]] and progress.done == 5
    assert [op for _, op in operations(t, before)] == ["ingest+take"] * 3 + ["ack"]
    calls = t.statistics()["calls"]
    assert (calls["take"], calls["ack"]) == (6, 6), "the primed task's take and ack, and five"
    assert stored_ids(t) == []


@pytest.mark.parametrize("engine", ["accelerated", "portable"])
def test_a_small_take_of_a_big_put_leases_its_tasks_alone_by_a_record(
        sq: Queue, spark: SparkSession, monkeypatch: pytest.MonkeyPatch, engine: str) -> None:
    """Its tasks are a few rows of the put files it reads: it commits its lease
    record alone, writing no other task, and the put's other rows wait in the
    inbox, where a peek sees them ready. Each next take does the same from the
    cursor it left, across put files, until the put is taken, each task once."""
    monkeypatch.setattr(store.schema, "INBOX_FILE_ROWS", 4)
    sq = sparkqueue.connect(spark, sq.root, owner="consumer-a", clock=sq.clock, engine=engine)
    t = primed(sq, "small", "fifottl", change_feed=False)
    t.put(spark.range(10).coalesce(1).selectExpr("id AS n"))  # files of 4, 4 and 2 rows
    before = tasks_version(t)
    assert ids(t.take(1)) == [1]
    assert stored_ids(t) == [], "the lease record alone: no task row"
    assert t.context.layout.cursor("small").partial == 1
    assert [r["status"] for r in t.peek([1, 2, 3, 4, 5]).orderBy("task_id").collect()] == [
        "taken", "ready", "ready", "ready", "ready"]
    assert ids(t.take(2)) == [2, 3]
    assert ids(t.take(3)) == [4, 5, 6], "across put files"
    assert t.context.layout.cursor("small").partial == 6
    assert ids(t.take(5)) == [7, 8, 9, 10]
    assert operations(t, before) == [("WRITE", "ingest+take")] * 4
    assert stored_ids(t) == []
    assert t.context.layout.cursor("small").partial == 0
    leased = t.peek(list(range(1, 11))).orderBy("task_id").collect()
    assert [(r["task_id"], r["status"]) for r in leased] == [(i, "taken") for i in range(1, 11)]


@pytest.mark.parametrize("engine", ["accelerated", "portable"])
def test_a_take_from_the_tasks_table_ingests_puts_that_come_before_its_tasks(
        sq: Queue, spark: SparkSession, monkeypatch: pytest.MonkeyPatch, engine: str) -> None:
    """Tasks the tasks table holds go first only where no waiting put may come
    before them: a put of a lower priority (urgent), or one whose priorities
    are a column, is ingested before the take chooses. (The tasks table holds
    ready tasks ahead of the puts once a lease record's tasks are released.)"""
    monkeypatch.setattr(store.schema, "INBOX_FILE_ROWS", 4)
    sq = sparkqueue.connect(spark, sq.root, owner="consumer-a", clock=sq.clock, engine=engine)
    t = primed(sq, "urgent", "fifottl", change_feed=False)
    t.put(spark.range(8).coalesce(1).selectExpr("id AS n"))
    t.release(t.take(4))
    assert stored_ids(t) == [1, 2, 3, 4], "released: written out of their record, ready"
    t.urgent({"n": 100})
    assert ids(t.take(1)) == [9], "the urgent put's task, ingested with the rest"
    assert stored_ids(t) == list(range(1, 10))
    t.put(spark.range(8).coalesce(1).selectExpr("id AS n"))
    assert ids(t.take(1)) == [1], "a put of the same priority comes after"
    assert stored_ids(t) == list(range(1, 10)), "and waits in the inbox"
    t.put([{"n": 0}], pri=F.lit(-1))
    assert ids(t.take(1)) == [18], "a put whose priority is a column may come first"


def test_a_take_whose_tasks_ahead_go_to_another_meanwhile_ingests_the_puts_first(
        sq: Queue, spark: SparkSession, clock: FakeClock, monkeypatch: pytest.MonkeyPatch,
        ) -> None:
    """A take found ready tasks ahead of the waiting puts and left them in the inbox;
    before it chose, another consumer took those tasks and a recorded lease ran
    out, which the take settled in a commit of its own, so the version it
    chooses from is a later one. It decides again there: the lease that ran
    out is of a task behind the puts (a higher priority number), so the puts
    are ingested and their first task is the one it leases. (Its statement
    chooses: the head-files executor turned down, as where statistics do not
    show the head.)"""
    monkeypatch.setattr(store.schema, "INBOX_FILE_ROWS", 4)
    t = primed(sq, "behind", "fifottl", change_feed=False)
    other = sparkqueue.connect(spark, sq.root, owner="consumer-b", clock=sq.clock).tube("behind")
    t.put({"n": 0}, pri=5, ttr=10)
    assert ids(t.take(1)) == [1], "a lease record: settled by a commit once it ends"
    t.put(spark.range(8).coalesce(1).selectExpr("id AS n"))  # tasks 2 to 9, files of 4
    other.release(other.take(4))  # tasks 2 to 5 written out of their record, ready
    assert ids(other.take(1)) == [2], "leased in a file apart from 3, 4 and 5"
    assert stored_ids(t)[-4:] == [2, 3, 4, 5], "3, 4 and 5 ready ahead of the puts of 6 to 9"
    decide = ingest_for_take
    raced: list[list[int]] = []

    def taken_meanwhile(ctx: Any, n: int, *args: Any) -> bool:
        ingested = decide(ctx, n, *args)
        if not raced and n == 1 and not ingested:
            raced.append(ids(other.take(3)))
            clock.advance(11)  # task 1's lease ends: ready again, behind the puts
        return ingested

    monkeypatch.setattr(ops, "ingest_for_take", taken_meanwhile)
    monkeypatch.setattr(take, "take_files", lambda *args, **kwargs: None)
    assert ids(t.take(1)) == [6], "the first waiting put's task, not task 1"
    assert raced == [[3, 4, 5]]
    assert [r["status"] for r in t.peek(list(range(1, 10))).orderBy("task_id").collect()] == [
        "ready", "taken", "taken", "taken", "taken", "taken", "ready", "ready", "ready"]
