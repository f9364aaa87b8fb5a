"""What is particular to the ttl drivers: time and priorities.

fifottl and utubettl (one sub-queue per task here; see tests/conftest.py) run
every test; limfifottl is fifottl plus a capacity, checked in test_limfifottl.py.

Time moves by the Queue's injected clock, never by sleeping.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from sparkqueue import (
    FakeClock,
    InvalidOption,
    InvalidState,
    NotSupported,
    Queue,
    TaskNotFound,
    Tube,
    store,
)
from sparkqueue.engine import ingest as ingest_module
from sparkqueue.engine.ingest import ingest
from sparkqueue.store import head_bound, may_hold_ready, ready_head
from tests.conftest import contract_tube, first_row, ids, spark_jobs


@pytest.fixture(params=["fifottl", "utubettl"])
def ttl_tube(request: pytest.FixtureRequest, sq: Queue):  # type: ignore[no-untyped-def]
    return contract_tube(sq, "tt", request.param)


def status(t: Tube, task_id: int) -> str:
    return str(first_row(t.peek(task_id))["status"])


def test_delayed_put_becomes_ready_when_the_delay_passes(ttl_tube: Tube, clock: FakeClock) -> None:
    task = ttl_tube.put({"n": 1}, delay=5)
    assert task.status == "delayed"
    assert ttl_tube.put({"n": 2}, delay=0).status == "ready"  # delay 0 is not delayed
    assert ids(ttl_tube.take(5)) == [task.task_id + 1]
    clock.advance(5)
    assert status(ttl_tube, task.task_id) == "ready"  # no sweeper needed
    assert ids(ttl_tube.take()) == [task.task_id]
    assert ttl_tube.statistics()["calls"]["delay"] == 1


def test_ttl_expiry_removes_unused_tasks(ttl_tube: Tube, clock: FakeClock) -> None:
    task = ttl_tube.put({"n": 1}, ttl=10)
    ttl_tube.take()
    ttl_tube.release(task.task_id)  # a release keeps the ttl (utubettl loses it: behaviour 80)
    clock.advance(9.9)
    assert status(ttl_tube, task.task_id) == "ready"
    clock.advance(0.2)
    with pytest.raises(TaskNotFound):
        ttl_tube.peek(task.task_id)
    assert ttl_tube.take(timeout=0).count() == 0
    stats = ttl_tube.statistics()
    assert stats["tasks"]["total"] == 0
    assert stats["tasks"]["done"] == 1 and stats["calls"]["ttl"] == 1


def test_ttl_counts_from_put_and_includes_the_delay(ttl_tube: Tube, clock: FakeClock) -> None:
    task = ttl_tube.put({"n": 1}, ttl=60, delay=80)
    clock.advance(139)
    assert status(ttl_tube, task.task_id) == "ready"
    clock.advance(2)
    with pytest.raises(TaskNotFound):
        ttl_tube.peek(task.task_id)


def test_ttr_expiry_returns_a_task_to_ready(ttl_tube: Tube, clock: FakeClock) -> None:
    task = ttl_tube.put({"n": 1}, ttr=30)
    ttl_tube.take()
    clock.advance(31)
    assert status(ttl_tube, task.task_id) == "ready"
    with pytest.raises(InvalidState):
        ttl_tube.ack(task.task_id)
    retaken = ttl_tube.take()
    assert first_row(retaken)["taken_count"] == 2
    assert ttl_tube.statistics()["calls"]["ttr"] == 1


def test_ttr_defaults_to_ttl_and_a_lease_ends_at_the_earlier(ttl_tube: Tube,
                                                              clock: FakeClock) -> None:
    short = ttl_tube.put({"n": 1}, ttl=20, ttr=100).task_id
    ttl_tube.take()
    assert ttl_tube.meta(short)["event"] == pytest.approx(clock() + 20)
    clock.advance(21)  # the ttl ended inside the lease: the task is gone
    with pytest.raises(TaskNotFound):
        ttl_tube.peek(short)
    default = ttl_tube.put({"n": 2}, ttl=50).task_id
    assert ttl_tube.meta(default)["ttr"] == 50


def test_touch_extends_the_lease(ttl_tube: Tube, clock: FakeClock) -> None:
    task = ttl_tube.put({"n": 1}, ttl=20, ttr=10).task_id
    ttl_tube.take()
    touched = ttl_tube.touch(task, 30)
    assert first_row(touched)["ttr"] == 40
    clock.advance(15)
    assert status(ttl_tube, task) == "taken"
    assert ids(ttl_tube.ack(task)) == [task]
    with pytest.raises(InvalidOption):
        ttl_tube.touch(task, -1)


def test_buried_task_keeps_its_ttl_not_its_ttr(ttl_tube: Tube, clock: FakeClock) -> None:
    task = ttl_tube.put({"n": 1}, ttl=100, ttr=2).task_id
    ttl_tube.take()
    ttl_tube.bury(task)
    clock.advance(50)
    assert status(ttl_tube, task) == "buried"
    clock.advance(51)
    with pytest.raises(TaskNotFound):
        ttl_tube.peek(task)


def test_priority_order_and_kick_order(ttl_tube: Tube) -> None:
    five, one_a, one_b, zero = (ttl_tube.put({"p": p}, pri=p).task_id for p in (5, 1, 1, 0))
    assert [r["task_id"] for r in ttl_tube.take(4).orderBy("pri", "task_id").collect()] == [
        zero, one_a, one_b, five]
    ttl_tube.bury([five, one_a, one_b, zero])
    ttl_tube.kick(1)
    assert ids(ttl_tube.tasks_by_state("ready")) == [zero]


def test_release_with_delay_delays_and_extends_ttl(ttl_tube: Tube, clock: FakeClock) -> None:
    task = ttl_tube.put({"n": 1}, ttl=10, ttr=20).task_id
    ttl_tube.take()
    released = ttl_tube.release(task, delay=5)
    row = first_row(released)
    assert row["status"] == "delayed"
    assert row["ttl"] == 15 and row["ttr"] == 20
    assert ttl_tube.take(timeout=0).count() == 0
    clock.advance(5)
    assert ids(ttl_tube.take()) == [task]


def test_per_row_options_from_columns(ttl_tube: Tube, spark: SparkSession,
                                      clock: FakeClock) -> None:
    df = spark.createDataFrame([("a", 0.0, 3), ("b", 50.0, 1)], "k string, d double, p int")
    created = ttl_tube.put(df, delay=F.col("d"), pri=F.col("p"))
    assert {r["data"]["k"]: r["status"] for r in created.collect()} == {
        "a": "ready", "b": "delayed"}
    clock.advance(50)
    assert [r["data"]["k"] for r in ttl_tube.take(2).orderBy("pri").collect()] == ["b", "a"]
    bad = spark.createDataFrame([("c", -1.0)], "k string, d double")
    with pytest.raises(InvalidOption, match="delay"):
        ttl_tube.put(bad.select("k"), delay=F.lit(-1.0))


def test_tube_defaults(sq: Queue, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    # the puts' tag values through the join (what an ingest of many puts uses)
    monkeypatch.setattr(ingest_module, "TAGS_INLINE", 0)
    t = sq.create_tube("defaults", "fifottl", ttl=100, ttr=10, pri=3, delay=5)
    task = t.put({"n": 1})
    meta = t.meta(task.task_id)
    assert (task.status, meta["ttl"], meta["ttr"], meta["pri"]) == ("delayed", 100, 10, 3)
    assert meta["event"] == pytest.approx(clock() + 5)


def test_infinite_ttl_by_default(ttl_tube: Tube) -> None:
    meta = ttl_tube.meta(ttl_tube.put({"n": 1}).task_id)
    assert math.isinf(meta["ttl"]) and math.isinf(meta["ttr"])


def test_fifo_has_no_time_options(sq: Queue) -> None:
    fifo = sq.create_tube("plain", "fifo")
    with pytest.raises(InvalidOption, match="ttl"):
        fifo.put({"n": 1}, ttl=5)
    task = fifo.put({"n": 1}).task_id
    fifo.take()
    with pytest.raises(NotSupported):
        fifo.touch(task, 5)
    with pytest.raises(NotSupported):
        fifo.release(task, delay=5)


def test_a_take_reads_only_the_head_and_misses_no_lower_task(
        sq: Queue, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    """fifo takes read only the files whose statistics reach below the n lowest
    ready tasks; a released task, a passed delay and an urgent put still come first."""
    monkeypatch.setattr(store.schema, "FEW_FILES", 0)  # bound even a table of a few files
    t = sq.create_tube("head", "fifottl")
    a = ids(t.put([{"n": i} for i in range(4)]))
    late = t.put({"n": 4}, delay=5).task_id
    assert ids(t.take(2)) == a[:2]  # ingests a and late into files that are not all ready
    b = ids(t.put([{"n": i} for i in range(4)]))
    ingest(t.context)  # b: a file of ready tasks only
    c = ids(t.put([{"n": i} for i in range(4)]))
    ingest(t.context)  # c: another, above b
    t.release(a[0])
    clock.advance(5)
    urgent = t.urgent({"n": -1}).task_id
    ingest(t.context)
    path = t.context.layout.tasks("head")
    bound = head_bound(t.context.layout.file_stats(path), clock(), 3)
    assert bound is not None  # bounded: c unread
    assert ids(t.take(3)) == sorted([urgent, a[0], a[2]])
    assert ids(t.take(3)) == sorted([a[3], late, b[0]])
    assert ids(t.take(5)) == b[1:] + c[:2]
    # the statistics replayed from the commits since the first take are a fresh read's
    replayed = t.context.layout.file_stats(path)
    fresh = store.Layout(t.context.layout.spark, t.context.layout.root).file_stats(path)
    assert len(replayed) > 2 and sorted(map(repr, replayed)) == sorted(map(repr, fresh))


def test_a_take_nothing_can_answer_runs_no_spark_job_and_misses_nothing(
        sq: Queue, spark: SparkSession, clock: FakeClock) -> None:
    """File statistics that leave no room for a ready task answer a take without
    reading the table; an ended lease or a passed delay leaves room again."""
    t = sq.create_tube("stats", "fifottl", ttr=10)
    t.put([{"n": i} for i in range(3)])
    assert ids(t.take(3)) == [0, 1, 2]
    before = spark_jobs(spark)
    empty = t.take(2)
    assert spark_jobs(spark) == before, "every task taken: no Spark job"
    assert empty.count() == 0
    clock.advance(11)  # the leases end
    assert ids(t.take(2)) == [0, 1]
    t.release([0, 1], delay=5)
    assert ids(t.take(3)) == [2], "two delayed, one whose lease ended"
    clock.advance(6)
    assert ids(t.take(3)) == [0, 1]


def test_may_hold_ready_reads_status_and_lease_statistics() -> None:
    def f(lo: str, hi: str, lease: float | None = 100.0, rows: int | None = 5,
          ) -> dict[str, Any]:
        return {"rows": rows, "min_status": lo, "max_status": hi, "status_nulls": 0,
                "min_lease_end": lease, "max_ttl_end": None, "ttl_end_nulls": 0}
    assert not may_hold_ready(f("taken", "taken"), 50.0), "leases end at 100"
    assert may_hold_ready(f("taken", "taken"), 100.0)
    assert not may_hold_ready(f("_marker", "_marker"), 50.0)
    assert not may_hold_ready(f("buried", "buried"), 50.0)
    assert not may_hold_ready(f("done", "done"), 50.0)
    assert may_hold_ready(f("buried", "done"), 50.0), "delayed sorts between"
    assert may_hold_ready(f("buried", "taken"), 50.0), "ready sorts between"
    assert may_hold_ready(f("delayed", "delayed"), 50.0)
    assert may_hold_ready(f("ready", "ready", rows=None), 50.0), "no statistics: maybe"
    assert not may_hold_ready(f("ready", "ready", rows=0), 50.0)


def test_ready_head_is_whole_files_of_ready_tasks_that_come_first() -> None:
    def f(lo: int, hi: int, *, rows: int | None = None, status: tuple[str, str] = ("ready",
          "ready"), pri: tuple[int, int] = (0, 0), keys: tuple[int, int] | None = None,
          ttl_end: float = 100.0) -> dict[str, Any]:
        return {"rows": hi - lo + 1 if rows is None else rows, "min_task_id": lo,
                "max_task_id": hi, "min_status": status[0], "max_status": status[1],
                "status_nulls": 0, "min_pri": pri[0], "max_pri": pri[1],
                "min_order_key": (keys or (lo, hi))[0], "max_order_key": (keys or (lo, hi))[1],
                "min_ttl_end": ttl_end, "max_ttl_end": ttl_end, "ttl_end_nulls": 0,
                "min_lease_end": 100.0}
    a, b, c = f(0, 4), f(5, 9), f(10, 14)
    assert ready_head([b, a, c], 50.0, 10) == (0, 9), "whole files, lowest ids first"
    assert ready_head([a, b, c], 50.0, 5) == (0, 4)
    assert ready_head([a, b, c], 50.0, 7) is None, "would cut a file"
    assert ready_head([a, b], 50.0, 20) == (0, 9), "fewer than n: every ready task"
    assert ready_head([a, b, f(20, 24, rows=3)], 50.0, 20) is None, "ids with gaps: unknown"
    assert ready_head([f(0, 4, status=("ready", "taken")), b], 50.0, 5) is None
    assert ready_head([f(0, 4, status=("taken", "taken")), b], 50.0, 5) == (5, 9), (
        "leases running: no ready task there")
    assert ready_head([a, b, f(10, 14, pri=(-1, 0))], 50.0, 5) is None, "urgent comes first"
    assert ready_head([a, b, f(10, 14, pri=(1, 1))], 50.0, 10) == (0, 9)
    assert ready_head([a, b, f(10, 14, keys=(3, 14))], 50.0, 10) is None, "a kicked task"
    assert ready_head([a, f(5, 9, pri=(1, 1)), c], 50.0, 10) is None, "pri changes"
    assert ready_head([a, b], 100.0, 5) is None, "ttl ended: not ready"
    assert ready_head([], 50.0, 5) is None
