"""The contract every driver keeps: each verb and each transition of the state diagram."""

from __future__ import annotations

import pytest
from chispa import assert_df_equality
from pyspark.sql import SparkSession

import sparkqueue
from sparkqueue import InvalidState, NotOwner, Queue, Task, TaskNotFound, Tube
from tests.conftest import first_row, ids, versions


def states(t: Tube, *task_ids: int) -> dict[int, str]:
    return {r["task_id"]: r["status"] for r in t.peek(list(task_ids)).collect()}


def test_put_take_ack_round_trip(tube: Tube, spark: SparkSession) -> None:
    assert tube.take(timeout=0).count() == 0  # an empty tube gives an empty DataFrame
    task = tube.put(123)
    assert isinstance(task, Task)
    assert (task.status, task.data) == ("ready", {"value": 123})
    taken = tube.take()
    assert [(r["task_id"], r["status"], r["data"]["value"]) for r in taken.collect()] == [
        (task.task_id, "taken", 123)]
    done = tube.ack(taken)
    assert [(r["task_id"], r["status"]) for r in done.collect()] == [(task.task_id, "done")]
    with pytest.raises(TaskNotFound):
        tube.peek(task.task_id)
    assert tube.take(5, timeout=0.3).count() == 0  # ... after waiting for the timeout


def test_dataframe_put_keeps_every_column_as_payload(tube: Tube, spark: SparkSession) -> None:
    df = spark.createDataFrame([("a.com", 1), ("b.com", 2)], "url string, depth int")
    created = tube.put(df)
    expected = spark.createDataFrame(
        [("ready", ("a.com", 1)), ("ready", ("b.com", 2))],
        "status string, data struct<url:string, depth:int>")
    assert_df_equality(created.select("status", "data"), expected, ignore_row_order=True)
    first, second = ids(created)
    assert first < second  # ids increase in put order


def test_fifo_order_and_ids_unique_forever(tube: Tube) -> None:
    first = ids(tube.put([{"n": i} for i in range(4)]))
    got = [first_row(tube.take())["data"]["n"] for _ in range(2)]
    assert got == [0, 1]
    tube.delete(first[3])
    later = tube.put({"n": 9})
    # no reuse of a deleted id (Tarantool reuses: fixed); ids grow within a shard
    n = len(tube.parts)
    assert later.task_id not in first
    assert later.task_id > max([i for i in first if i % n == later.task_id % n], default=-1)
    tube.truncate()
    again = tube.put({"n": 10}).task_id
    assert again != later.task_id and (again % n != later.task_id % n or again > later.task_id)


def test_take_n_lowest_ids_first_immutable_results_and_dataframes_of_tasks(tube: Tube) -> None:
    put = tube.put([{"n": i} for i in range(5)])
    created = ids(put)
    first = tube.take(3)
    assert ids(first) == created[:3]
    second = tube.take(3)
    assert ids(second) == created[3:]
    before = sorted((r["task_id"], r["status"]) for r in first.collect())
    tube.ack(first)  # tasks as a DataFrame: a take's result...
    assert sorted((r["task_id"], r["status"]) for r in first.collect()) == before  # immutable
    assert ids(tube.release(second.select("task_id"))) == created[3:]  # ... or any task_id column
    assert ids(tube.delete(put.where(f"task_id >= {created[3]}"))) == created[3:]


def test_release_returns_task_to_its_place(tube: Tube) -> None:
    created = ids(tube.put([{"n": i} for i in range(4)]))
    t1, t2 = ids(tube.take(2))
    tube.release(t1)
    assert states(tube, t1, t2) == {t1: "ready", t2: "taken"}
    assert ids(tube.take(3)) == [t1, created[2], created[3]]


def test_only_the_owner_may_ack_and_a_refused_batch_writes_nothing(
        tube: Tube, sq: Queue, spark: SparkSession) -> None:
    tube.put([{"n": 1}, {"n": 2}])
    mine = ids(tube.take(1))
    other = sparkqueue.connect(spark, sq.root, owner="consumer-b", clock=sq.clock)
    theirs = ids(other.tube("t").take(1))
    before = versions(tube)
    with pytest.raises(NotOwner) as err:
        tube.ack(mine + theirs)
    assert err.value.task_ids == theirs
    assert versions(tube) == before
    assert states(tube, *mine) == {mine[0]: "taken"}
    # same owner, another Queue object: the same consumer (Tarantool's identify)
    same = sparkqueue.connect(spark, sq.root, owner="consumer-a", clock=sq.clock)
    assert ids(same.tube("t").ack(mine)) == mine
    assert ids(tube.ack(theirs, owner="consumer-b")) == theirs


def test_ack_needs_a_taken_task(tube: Tube) -> None:
    ready = tube.put({"n": 1}).task_id
    tube.take(0 + 1)
    tube.release(ready)
    before = versions(tube)
    with pytest.raises(InvalidState):
        tube.ack(ready)
    with pytest.raises(TaskNotFound) as err:
        tube.ack([ready, 999_999])
    assert err.value.task_ids == [999_999]
    assert versions(tube) == before


def test_bury_kick_dig_delete(tube: Tube) -> None:
    a, b, c, d = ids(tube.put([{"n": i} for i in range(4)]))
    tube.take(2)
    buried = tube.bury([a, c])  # one taken, one ready: bury works from any state
    assert sorted((r["task_id"], r["status"]) for r in buried.collect()) == [
        (a, "buried"), (c, "buried")]
    assert ids(tube.take(5)) == [d]  # buried tasks are skipped
    assert tube.kick(1) == 1  # lowest id first
    assert states(tube, a, c) == {a: "ready", c: "buried"}
    assert first_row(tube.dig(c))["status"] == "ready"
    with pytest.raises(InvalidState):
        tube.dig(c)
    assert tube.kick(100) == 0
    deleted = tube.delete([a, b, c, d])
    assert {r["status"] for r in deleted.collect()} == {"done"}
    assert tube.tasks_by_state("ready").count() == 0
    with pytest.raises(TaskNotFound):
        tube.delete(a)


def test_bury_of_buried_task_is_unchanged_and_counts_once(tube: Tube) -> None:
    t = tube.put({"n": 1}).task_id
    tube.bury(t)
    assert tube.bury(t).count() == 0
    assert tube.statistics()["calls"]["bury"] == 1


def test_requeue_moves_task_to_the_end(tube: Tube) -> None:
    a, b, c = ids(tube.put([{"n": i} for i in range(3)]))
    tube.take(1)
    assert first_row(tube.requeue(a))["status"] == "ready"
    assert ids(tube.take(1)) == [b]
    assert ids(tube.take(1)) == [c]
    assert ids(tube.take(1)) == [a]
    tube.put([{"n": 4}, {"n": 5}])
    u = tube.urgent({"n": 0})
    n = len(tube.parts)
    taken = [ids(tube.take(1))[0] for _ in range(3)]
    # urgent goes first (on a sharded tube, first of its shard's tasks)
    assert [i for i in taken if i % n == u.task_id % n][0] == u.task_id


def test_done_completes_and_keeps_the_task(tube: Tube) -> None:
    t = tube.put({"n": 1}).task_id
    tube.take(owner="worker-b")
    with pytest.raises(NotOwner):  # this Queue's owner did not take it
        tube.done(t, {"n": 42})
    result = tube.done(t, {"n": 42}, owner="worker-b")
    assert [(r["status"], r["data"]["n"]) for r in result.collect()] == [("done", 42)]
    assert [(r["status"], r["data"]["n"]) for r in tube.peek(t).collect()] == [("done", 42)]
    assert tube.take(timeout=0).count() == 0
    assert ids(tube.tasks_by_state("done")) == [t]


def test_peek_is_read_only_and_tasks_by_state(tube: Tube) -> None:
    created = ids(tube.put([{"n": i} for i in range(5)]))
    tube.take(2)
    before = versions(tube)
    assert states(tube, *created) == {i: ("taken" if i in created[:2] else "ready")
                                      for i in created}
    assert versions(tube) == before
    assert tube.tasks_by_state("ready").count() == 3
    assert ids(tube.tasks_by_state("t")) == created[:2]  # Tarantool's letters work too
    with pytest.raises(TaskNotFound):
        tube.peek(424242)
    assert tube.peek([424242]).count() == 0


def test_meta(tube: Tube, clock: sparkqueue.FakeClock) -> None:
    t = tube.put({"n": 1}).task_id
    tube.take()
    meta = tube.meta(t)
    assert meta["task_id"] == t and meta["status"] == "taken" and meta["tube"] == "t"
    assert meta["owner"] == "consumer-a" and meta["taken_count"] == 1
    assert meta["created"] == clock() and meta["now"] == clock()


def test_release_all(tube: Tube, sq: Queue, spark: SparkSession) -> None:
    tube.put([{"n": i} for i in range(3)])
    tube.take(2)
    other = sparkqueue.connect(spark, sq.root, owner="consumer-b", clock=sq.clock)
    other.tube("t").take(1)
    assert tube.release_all() == 3
    assert tube.tasks_by_state("ready").count() == 3
    assert tube.statistics()["calls"]["release"] == 3


def test_truncate_and_drop(tube: Tube, sq: Queue) -> None:
    tube.put([{"n": i} for i in range(3)])
    tube.take(1)
    with pytest.raises(InvalidState):
        tube.drop()
    tube.truncate()
    assert tube.statistics()["tasks"]["total"] == 0
    assert tube.statistics()["calls"]["put"] == 3  # truncate leaves the counters
    tube.drop()
    assert sq.tubes() == []
    with pytest.raises(sparkqueue.TubeNotFound):
        sq.tube("t")


def test_statistics_canonical_script(tube: Tube, sq: Queue, spark: SparkSession) -> None:
    """Tarantool's t/010-fifo.t statistics script (behaviour 50)."""
    t0, t1, t2, t3, t4 = ids(tube.put([{"n": i} for i in range(5)]))
    tube.delete(t4)
    tube.take()
    tube.release(t0)
    tube.take()
    tube.ack(t0)
    tube.bury(t1)
    tube.bury(t2)
    tube.kick(1)
    tube.take()
    expected = {
        "tasks": {"ready": 1, "taken": 1, "buried": 1, "delayed": 0, "done": 2, "total": 3},
        "calls": {"put": 5, "take": 3, "ack": 1, "release": 1, "bury": 2, "kick": 1,
                  "delete": 1, "touch": 0, "ttl": 0, "ttr": 0, "delay": 0},
    }
    assert tube.statistics() == expected
    # from the Delta log: another process (a fresh Queue) sees the same figures
    fresh = sparkqueue.connect(spark, sq.root, clock=sq.clock)
    assert fresh.statistics("t") == expected
    assert fresh.statistics() == {"t": expected}


def test_on_task_change_events(tube: Tube) -> None:
    seen: list[tuple[str, list[str]]] = []

    def record(df: object, event: str) -> None:
        seen.append((event, sorted(r["status"] for r in df.collect())))  # type: ignore[attr-defined]

    assert tube.on_task_change(record) is None
    a, b = ids(tube.put([{"n": 1}, {"n": 2}]))
    tube.take()
    tube.ack(a)
    tube.bury(b)
    tube.kick(1)
    tube.delete(b)
    assert seen == [("put", ["ready", "ready"]), ("take", ["taken"]), ("ack", ["done"]),
                    ("bury", ["buried"]), ("kick", ["ready"]), ("delete", ["done"])]
    assert tube.on_task_change() is record
    tube.put({"n": 3})
    assert len(seen) == 6


def test_a_consumers_acks_that_ride_with_its_takes_are_events_too(tube: Tube) -> None:
    seen: dict[str, int] = {}

    def record(df: object, event: str) -> None:
        seen[event] = seen.get(event, 0) + df.count()  # type: ignore[attr-defined]

    tube.on_task_change(record)
    tube.put([{"n": i} for i in range(4)])
    progress = sparkqueue.Consumer(tube, lambda batch: None, batch_size=2, take_timeout=0,
                                   idle_timeout=0).run()
    assert progress.done == 4
    assert seen == {"put": 4, "take": 4, "ack": 4}
