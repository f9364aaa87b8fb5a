"""Lease records: a take of new puts, the lowest ids first, commits one row for its
lease instead of the leased task rows (``engine.records``).

What every verb, reader and process sees is as if the take had written its
tasks: peek, statistics, errors, expiry, the Consumer, truncate, the inbox
purge, and a Queue without the accelerator. The owner's ack of the batch
removes the record (the portable engine: a settle row closes it); anything
else first writes the record out as its tasks (``settle``), in one MERGE that
never brings back an acked batch. Each test runs on both engines.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import sparkqueue
from sparkqueue import Consumer, FakeClock, InvalidState, NotOwner, Queue, TaskNotFound, Tube
from sparkqueue import store as st
from sparkqueue.engine import ingest, records
from sparkqueue.sweep import purge

from ..conftest import ids, operations


@pytest.fixture(params=["accelerated", "portable"])
def sq(request: pytest.FixtureRequest, spark: SparkSession, root: str,
       clock: FakeClock) -> Queue:
    """Both engines write lease records: each test runs on each."""
    return sparkqueue.connect(spark, root, owner="consumer-a", clock=clock,
                              engine=request.param)


def recorded(sq: Queue, n: int = 5, take: int | None = None,
             **options: Any) -> tuple[Tube, DataFrame, int]:
    """A tube of ``n`` new puts and a take of ``take`` (default all) of them, its
    result and the tasks table's version before it."""
    t = sq.create_tube("rec", "fifottl", **options)
    t.put([{"n": i} for i in range(n)])
    before = t.context.layout.latest_version(t.context.layout.tasks("rec"))
    return t, t.take(take or n), before


def stored(t: Tube, spark: SparkSession, live: bool = True) -> list[tuple[Any, str]]:
    """The tasks table's rows (not the cursor markers): (task_id, status); ``live``:
    without the settle rows and the lease records they close, as readers see it."""
    rows = (spark.read.format("delta").load(t.context.layout.tasks("rec"))
            .where(f"status <> '{st.MARKER}'").collect())
    closed = {r["change_token"] for r in rows if r["status"] == st.SETTLED}
    if live:
        rows = [r for r in rows if r["status"] != st.SETTLED
                and not (r["status"] == st.LEASE and r["change_token"] in closed)]
    return sorted(((r["task_id"], r["status"]) for r in rows), key=repr)


def test_a_take_of_new_puts_commits_its_lease_as_one_row_and_the_ack_removes_it(
        sq: Queue, spark: SparkSession) -> None:
    t, batch, before = recorded(sq)
    assert stored(t, spark) == [(None, st.LEASE)], "one row for the whole lease"
    assert operations(t, before) == [("WRITE", "ingest+take")]
    assert sorted((r["task_id"], r["status"], r["owner"], r["taken_count"])
                  for r in batch.collect()) == [(i, "taken", "consumer-a", 1) for i in range(5)]
    assert_df_equality(t.peek(list(range(5))), batch, ignore_row_order=True)
    stats = t.statistics()
    assert stats["tasks"]["taken"] == 5 and stats["calls"]["take"] == 5
    acked = t.ack(batch)
    # the portable engine appends a settle row, which closes the record
    closing = sq.engine == "portable"
    assert operations(t, before)[1:] == [("WRITE" if closing else "DELETE", "ack")]
    assert sorted((r["task_id"], r["status"]) for r in acked.collect()) == [
        (i, "done") for i in range(5)]
    assert stored(t, spark) == []
    assert stored(t, spark, live=False) == (
        sorted([(None, st.LEASE), (None, st.SETTLED)], key=repr) if closing else [])
    stats = t.statistics()
    assert stats["tasks"]["total"] == 0 and stats["tasks"]["done"] == 5
    assert stats["calls"]["ack"] == 5
    with pytest.raises(TaskNotFound):
        t.ack(batch)
    assert purge(t) == 5 + 2 * closing, "the inbox's puts; the record and its settle row"
    assert stored(t, spark, live=False) == []
    assert t.statistics()["calls"]["ack"] == 5


@pytest.mark.parametrize("how", ["remembered", "forgotten", "another_session"])
def test_the_ack_of_a_recorded_batch_returns_the_taken_rows_as_done(
        sq: Queue, spark: SparkSession, root: str, clock: FakeClock,
        monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """Built on the take's result where this process made the record in the ack's
    own session, else on the record read again: the same rows either way."""
    if how == "forgotten":
        monkeypatch.setattr(records, "taken_as", lambda *_: None)
    t, batch, _ = recorded(sq, n=3)
    if how == "another_session":
        other = sparkqueue.connect(spark.newSession(), root, owner="consumer-a", clock=clock)
        acked = other.tube("rec").ack([0, 1, 2])
        assert acked.sparkSession is not spark
    else:
        acked = t.ack(batch)
    assert_df_equality(acked, batch.withColumn("status", F.lit("done")),
                       ignore_row_order=True)
    assert stored(t, spark) == [], "the record is gone"


def test_a_record_of_many_puts_reads_just_its_rows_through_the_joined_tags(
        sq: Queue, spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``TAGS_INLINE`` puts a record's put tags come from a broadcast table,
    not a literal map: read again, it still holds its rows from its first to
    before its end, cut out of the middle of its first and last puts."""
    monkeypatch.setattr(ingest, "TAGS_INLINE", 0)
    monkeypatch.setattr(records, "taken_as", lambda *_: None)  # read the record again
    t = sq.create_tube("rec", "fifottl")
    for i in range(3):
        t.put([{"n": 3 * i + j} for j in range(3)])
    t.ack(t.take(2))
    batch = t.take(5)
    assert stored(t, spark) == [(None, st.LEASE)], "taken as a lease record"
    assert sorted((r["task_id"], r["data"]["n"], r["status"]) for r in batch.collect()) == [
        (i, i, "taken") for i in range(2, 7)]
    assert sorted(r["task_id"] for r in t.ack(batch).collect()) == list(range(2, 7))
    assert ids(t.take(5)) == [7, 8]


@pytest.mark.parametrize("sq", ["accelerated"], indirect=True)
def test_each_batch_is_read_by_the_code_the_first_one_compiled(
        sq: Queue, spark: SparkSession, clock: FakeClock) -> None:
    """A batch's rows are told apart by values Spark keeps as data, not by numbers
    it writes into its generated code, so reading the next batch's ids and
    payloads compiles nothing new. (Spark orders a query's common
    subexpressions by their hash, which the data's values change: a read
    compiles one of two orders of the same code, each once.)"""
    t = sq.create_tube("rec", "fifottl")
    for i in range(6):
        t.put([{"n": 2 * i}, {"n": 2 * i + 1}])
    metrics = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics  # type: ignore[union-attr]
    compiled = []
    for first in range(0, 12, 2):
        clock.advance(1)
        batch = t.take(2)
        assert stored(t, spark) == [(None, st.LEASE)], "taken as a lease record"
        before = metrics.METRIC_COMPILATION_TIME().getCount()
        with generated_code(spark):  # the test session's queries run without
            got = batch.select("task_id", "data").collect()
        compiled.append(metrics.METRIC_COMPILATION_TIME().getCount() - before)
        assert sorted((r["task_id"], r["data"]["n"]) for r in got) == [(first, first),
                                                                        (first + 1, first + 1)]
        t.ack(batch)
    assert compiled[0] > 0 and sum(compiled[1:]) <= compiled[0], compiled


@contextmanager
def generated_code(spark: SparkSession) -> Iterator[None]:
    """Spark's defaults for generated code, which the test session turns off."""
    settings = {"spark.sql.codegen.wholeStage": "true", "spark.sql.codegen.factoryMode": "FALLBACK"}
    before = {k: str(spark.conf.get(k)) for k in settings}  # both set by the test session
    for k, v in settings.items():
        spark.conf.set(k, v)
    try:
        yield
    finally:
        for k, old in before.items():
            spark.conf.set(k, old)


@pytest.mark.parametrize("meanwhile", ["settled", "one_deleted"])
def test_a_record_changed_before_its_ack_deletes_it_acks_all_or_nothing(
        sq: Queue, spark: SparkSession, root: str, clock: FakeClock,
        monkeypatch: pytest.MonkeyPatch, meanwhile: str) -> None:
    """Between the ack's look at the record (its file, the caller's, running) and its
    commit, another commit writes the record out as its tasks, or deletes one of
    them. The ack's one-row commit (the portable engine's settle row, the
    accelerated removal of the record's file) then closes or removes nothing:
    the MERGE acks the batch whole, or refuses it whole, naming the task gone;
    statistics count the batch's acks once, or not at all."""
    t, batch, before = recorded(sq)
    other = sparkqueue.connect(spark, root, owner="admin", clock=clock,
                               engine=sq.engine).tube("rec")
    real_close, real_remove = records.close, t.context.layout.store.remove_files

    def first(change: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            monkeypatch.undo()
            if meanwhile == "settled":
                other.release_all()  # every record written out (here: released)
                other.take(5, owner="consumer-a")  # ... and leased to the caller again
            else:
                other.delete([2])
            return change(*args, **kwargs)
        return wrapped

    monkeypatch.setattr(records, "close", first(real_close))
    monkeypatch.setattr(t.context.layout.store, "remove_files", first(real_remove))
    if meanwhile == "settled":
        assert ids(t.ack(batch)) == list(range(5))
        assert stored(t, spark) == []
    else:
        with pytest.raises(TaskNotFound) as refused:
            t.ack(batch)
        assert refused.value.task_ids == [2]
        assert stored(t, spark) == [(i, "taken") for i in (0, 1, 3, 4)], "nothing acked"
    merges = [(kind, op) for kind, op in operations(t, before) if op == "ack" and kind != "WRITE"]
    assert len(merges) == (meanwhile == "settled"), "one ack that removed a task, or none"
    assert t.statistics()["calls"]["ack"] == (5 if meanwhile == "settled" else 0)


def test_another_verb_on_recorded_tasks_writes_them_out_first(sq: Queue,
                                                             spark: SparkSession) -> None:
    t, batch, before = recorded(sq)
    t.release([1, 3])
    assert operations(t, before)[1:] == [("MERGE", "settle"), ("MERGE", "release")]
    assert stored(t, spark) == [(0, "taken"), (1, "ready"), (2, "taken"), (3, "ready"),
                                (4, "taken")]
    assert ids(t.ack([0, 2, 4])) == [0, 2, 4]
    assert ids(t.take(5)) == [1, 3]
    assert t.statistics()["calls"]["take"] == 7, "the settle counts no call"


@pytest.mark.parametrize("verb", ["release", "touch", "bury", "delete"])
def test_the_owners_verb_on_a_recorded_batch_is_one_commit(
        sq: Queue, spark: SparkSession, clock: FakeClock, verb: str) -> None:
    """A release, touch, bury or delete of exactly the batch a record holds changes
    every task in one commit (the accelerated engine rewrites or removes the
    record's file; the portable one replaces its row by its tasks with the
    verb's SET in one MERGE, or deletes it), counted and sent as the verb."""
    t, batch, before = recorded(sq, ttr=30)
    events: list[tuple[str, list[int]]] = []
    t.on_task_change(lambda tasks, kind: events.append((kind, ids(tasks))))
    calls: dict[str, Callable[[], DataFrame]] = {
        "release": lambda: t.release(batch), "touch": lambda: t.touch(batch, 60),
        "bury": lambda: t.bury(batch), "delete": lambda: t.delete(batch)}
    result = calls[verb]()
    status = {"release": "ready", "touch": "taken", "bury": "buried", "delete": "done"}[verb]
    assert sorted((r["task_id"], r["status"]) for r in result.collect()) == [
        (i, status) for i in range(5)]
    assert [op for _, op in operations(t, before)[1:]] == [verb], "one commit"
    assert stored(t, spark) == ([] if verb == "delete" else [(i, status) for i in range(5)])
    assert t.statistics()["calls"][verb] == 5
    assert events == [(verb, list(range(5)))]
    clock.advance(31)  # the first lease's end: only a touched batch is still held
    if verb == "touch":
        assert ids(t.ack(batch)) == list(range(5))
    elif verb != "delete":
        assert {r["status"] for r in t.peek(list(range(5))).collect()} == {status}


def test_a_verb_on_a_recorded_batch_whose_lease_ended_changes_nothing(
        sq: Queue, spark: SparkSession, clock: FakeClock) -> None:
    """The record's time has run out: the one commit on its row does not apply, and
    the MERGE refuses the batch as it refuses any ended lease."""
    t, batch, before = recorded(sq, ttr=30)
    clock.advance(31)
    with pytest.raises(InvalidState):
        t.release(batch)
    assert "release" not in [op for _, op in operations(t, before)]
    assert {r["status"] for r in t.peek(list(range(5))).collect()} == {"ready"}


@pytest.mark.parametrize("sq", ["portable"], indirect=True)
def test_a_record_changed_before_the_merge_that_releases_it_releases_all_or_nothing(
        sq: Queue, spark: SparkSession, root: str, clock: FakeClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Between the release's look at the record and its MERGE, another commit deletes
    one of its tasks (writing the record out first). The MERGE, whose join holds
    the lease's condition on the record's row, then changes nothing and commits
    nothing; the statement path refuses the batch whole, naming the task gone."""
    t, batch, before = recorded(sq)
    other = sparkqueue.connect(spark, root, owner="admin", clock=clock,
                               engine=sq.engine).tube("rec")
    real = records.write_out
    actions: list[Any] = []

    def meanwhile(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.undo()
        actions.append(args[3] if len(args) > 3 else kwargs.get("action"))
        other.delete([2])
        return real(*args, **kwargs)

    monkeypatch.setattr(records, "write_out", meanwhile)
    with pytest.raises(TaskNotFound) as refused:
        t.release(batch)
    assert refused.value.task_ids == [2]
    assert actions and actions[0] is not None, "the release's own write-out, not a settle"
    assert stored(t, spark) == [(i, "taken") for i in (0, 1, 3, 4)], "nothing released"
    assert "release" not in [op for _, op in operations(t, before)]


def test_a_recorded_lease_that_ends_is_taken_again_and_refuses_the_old_ack(
        sq: Queue, clock: FakeClock) -> None:
    t, batch, _ = recorded(sq, ttr=30)
    clock.advance(31)
    assert {r["status"] for r in t.peek(list(range(5))).collect()} == {"ready"}
    again = t.take(5, owner="consumer-b")
    assert sorted((r["task_id"], r["taken_count"]) for r in again.collect()) == [
        (i, 2) for i in range(5)]
    with pytest.raises(NotOwner):
        t.ack(batch)
    assert ids(t.ack(again, owner="consumer-b")) == list(range(5))


def test_a_settle_of_a_record_acked_meanwhile_brings_no_task_back(
        sq: Queue, spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    """The settle's source reads the record in the MERGE's own snapshot: a record
    the settle chose but the owner acked first inserts nothing."""
    t, batch, _ = recorded(sq)
    ctx = t.context
    chosen = records.records_at(ctx, ctx.layout.latest_version(ctx.layout.tasks("rec")))
    assert len(chosen) == 1
    t.ack(batch)
    monkeypatch.setattr(records, "records_at", lambda *_: chosen)
    records.settle(ctx, lambda _: True)
    monkeypatch.undo()
    assert stored(t, spark) == []
    assert t.statistics()["tasks"]["total"] == 0


def test_an_ack_committed_while_a_settle_runs_makes_the_settle_conflict(
        sq: Queue, spark: SparkSession, root: str, clock: FakeClock, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Another Queue's settle MERGE reads the record, then, while it runs (its
    source waits in a Python UDF), the owner acks the batch: a settle row
    appended (portable) or the record's file removed (accelerated). The MERGE
    then conflicts (the tasks table is Serializable: an append conflicts too)
    and, tried again, finds no live record: no task comes back."""
    t, batch, _ = recorded(sq)
    other = sparkqueue.connect(spark, root, owner="admin", clock=clock,
                               engine=sq.engine).tube("rec")
    acked = tmp_path / "acked"
    waiter = socket.create_server(("127.0.0.1", 0))
    waiter.settimeout(120)
    port = waiter.getsockname()[1]

    def hold() -> bool:  # runs in a Python worker: it waits on the test's socket
        if not acked.exists():
            with socket.create_connection(("127.0.0.1", port), timeout=120) as held:
                held.recv(1)  # until the ack committed
        return True
    held = F.udf(lambda _: hold(), "boolean")
    real = records.expand
    monkeypatch.setattr(records, "expand", lambda *a: real(*a).where(held(F.lit(1))))
    settled: list[int] = []
    settle = threading.Thread(target=lambda: settled.append(
        records.settle(other.context, lambda _: True)))
    settle.start()
    with waiter:
        running, _ = waiter.accept()  # the settle's MERGE runs
        assert ids(t.ack(batch)) == list(range(5))
        acked.touch()
        running.close()  # let it go on: it must conflict
        waiter.settimeout(1)
        while settle.is_alive():  # a UDF of another partition may wait too
            try:
                waiter.accept()[0].close()
            except TimeoutError:
                pass
    settle.join()
    assert settled == [0], "tried again, it found no live record"
    assert [op for _, op in operations(t, 0)].count("settle") == 0
    assert stored(t, spark) == [] and t.statistics()["tasks"]["total"] == 0


def test_the_inbox_purge_keeps_the_puts_a_record_reads(sq: Queue) -> None:
    t, batch, _ = recorded(sq)
    assert purge(t) == 0, "the puts are the recorded tasks"
    assert {r["status"] for r in t.peek(list(range(5))).collect()} == {"taken"}
    assert sorted(r["n"] for r in t.ack(batch).select("data.n").collect()) == list(range(5))
    assert purge(t) == 5 + 2 * (sq.engine == "portable"), "and a record and its settle row"


def test_a_consumer_drains_through_lease_records_without_a_merge(
        sq: Queue, spark: SparkSession) -> None:
    t = sq.create_tube("rec", "fifottl")
    for k in range(3):
        t.put([{"n": 10 * k + i} for i in range(10)])
    before = t.context.layout.latest_version(t.context.layout.tasks("rec"))
    seen: list[int] = []
    done = Consumer(t, lambda b: seen.extend(r["data"]["n"] for r in b.collect()), batch_size=10,
                    take_timeout=0, idle_timeout=0).run().done
    assert done == 30 and sorted(seen) == list(range(30))
    assert {op for _, op in operations(t, before)} <= {"ingest+take", "ack"}
    assert stored(t, spark) == []
    stats = t.statistics()
    assert stats["tasks"]["total"] == 0 and stats["calls"]["ack"] == 30


def test_truncate_removes_lease_records(sq: Queue, spark: SparkSession) -> None:
    t, _, _ = recorded(sq)
    t.truncate()
    assert stored(t, spark) == []
    assert t.statistics()["tasks"]["total"] == 0
    t.put([{"n": 9}])
    assert ids(t.take(1)) == [5]


def test_a_queue_without_the_accelerator_sees_and_releases_recorded_tasks(
        sq: Queue, spark: SparkSession, root: str, clock: FakeClock) -> None:
    t, batch, _ = recorded(sq)
    portable = sparkqueue.connect(spark, root, owner="admin", clock=clock,
                                  engine="portable").tube("rec")
    assert portable.statistics()["tasks"]["taken"] == 5
    assert_df_equality(portable.peek(list(range(5))), batch, ignore_row_order=True)
    with pytest.raises(NotOwner):
        portable.ack([0])
    assert portable.release_all() == 5
    assert stored(t, spark) == [(i, "ready") for i in range(5)]
    assert ids(portable.take(5)) == list(range(5))
