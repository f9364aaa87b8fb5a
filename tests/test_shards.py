"""Sharded tubes: ids that name their shard, puts that take turns, takes that move
from shard to shard, verbs routed per shard, and consumers of two shards that
never conflict. (The contract suite runs on a sharded tube too: tests/contract.)"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import sparkqueue
from sparkqueue import (
    CapacityExceeded,
    Consumer,
    FakeClock,
    InvalidOption,
    InvalidState,
    Queue,
    TaskNotFound,
)
from sparkqueue.engine.shards import home_shard, utube_shard
from tests.conftest import ids, versions


def owners_of(count: int) -> list[str]:
    """Owner names whose takes start at shards 0, 1, ... ``count - 1``."""
    found: dict[int, str] = {}
    i = 0
    while len(found) < count:
        found.setdefault(home_shard(f"worker-{i}", count), f"worker-{i}")
        i += 1
    return [found[k] for k in range(count)]


def test_shards_are_checked_and_fixed_at_creation(sq: Queue) -> None:
    for bad in (0, 65, True, "2", 1.5):
        with pytest.raises(InvalidOption, match="shards"):
            sq.create_tube("t", "fifo", shards=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidOption, match="capacity"):
        sq.create_tube("t", "limfifottl", capacity=1, shards=2)
    assert sq.tubes() == []
    t = sq.create_tube("t", "fifo", shards=2)
    assert repr(t) == "Tube('t', type='fifo', shards=2)"
    assert len(sq.create_tube("t", "fifo", shards=2, if_not_exists=True).parts) == 2
    with pytest.raises(InvalidOption, match="fixed"):
        sq.create_tube("t", "fifo", shards=3, if_not_exists=True)
    assert len(sq.tube("t").parts) == 2
    capped = sq.create_tube("c", "limfifottl", capacity=4, shards=2)  # two tasks per shard
    assert len(ids(capped.put([1, 2]))) == len(ids(capped.put([3, 4]))) == 2
    assert capped.options["capacity"] == 4
    with pytest.raises(CapacityExceeded):
        capped.put([5])


def test_ids_name_their_shard_puts_take_turns_and_takes_move_on(sq: Queue) -> None:
    t = sq.create_tube("t", "fifottl", shards=2)
    puts = [ids(t.put([{"n": 2 * p}, {"n": 2 * p + 1}])) for p in range(3)]
    shards = [{i % 2 for i in put} for put in puts]
    assert all(len(s) == 1 for s in shards), "a put goes to one shard"
    assert shards[0] != shards[1] and shards[1] != shards[2], "puts take turns"
    every = sorted(i for put in puts for i in put)
    assert len(set(every)) == 6
    # a take never mixes shards; when its own has nothing ready it moves on
    first = ids(t.take(10))
    second = ids(t.take(10))
    assert {i % 2 for i in first} != {i % 2 for i in second}
    assert len({i % 2 for i in first}) == 1 and sorted(first + second) == every
    assert t.take(1, timeout=0).count() == 0
    # verbs on ids go to each id's shard; one call may name several
    assert ids(t.release(every)) == every
    assert sorted(r["status"] for r in t.peek(every).collect()) == ["ready"] * 6
    assert t.meta(every[-1])["task_id"] == every[-1]
    with pytest.raises(TaskNotFound):
        t.peek(every[-1] + 2)
    assert t.statistics()["tasks"]["ready"] == 6
    assert t.kick(3) == 0 and t.release_all() == 0


def test_a_batch_across_shards_with_one_bad_task_writes_nothing(sq: Queue) -> None:
    t = sq.create_tube("t", "fifottl", shards=2)
    t.put([{"n": 0}, {"n": 1}])
    t.put([{"n": 2}, {"n": 3}])
    taken = sorted(ids(t.take(10)) + ids(t.take(1)))
    ready = ids(t.tasks_by_state("ready"))
    assert {i % 2 for i in taken} == {0, 1} and len(ready) == 1
    before = versions(t)
    with pytest.raises(InvalidState) as refused:
        t.ack(taken + ready)
    assert refused.value.task_ids == ready
    with pytest.raises(TaskNotFound):
        t.release([*taken, 1001])
    assert versions(t) == before, "no shard's tables changed"
    assert ids(t.ack(taken)) == taken


def test_consumers_of_two_shards_commit_without_a_conflict(
        spark: SparkSession, root: str, clock: FakeClock) -> None:
    queues = [sparkqueue.connect(spark, root, owner=o, clock=clock) for o in owners_of(2)]
    queues[0].create_tube("t", "fifottl", shards=2)
    tubes = [q.tube("t") for q in queues]
    for _ in range(2):  # one put per shard
        tubes[0].put(spark.range(12).select(F.col("id").alias("n")))
    seen: dict[int, list[int]] = {0: [], 1: []}
    errors: list[BaseException] = []

    def consume(k: int) -> None:
        try:
            for _ in range(3):
                batch = tubes[k].take(4)
                seen[k] += ids(batch)
                tubes[k].ack(batch)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append(e)

    workers = [threading.Thread(target=consume, args=(k,)) for k in (0, 1)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors
    # each took from its own shard only, all 24 tasks once, and nothing conflicted
    assert [{i % 2 for i in seen[k]} for k in (0, 1)] == [{0}, {1}]
    assert len(set(seen[0] + seen[1])) == 24
    assert [c.conflicts for tube in tubes for c in map(lambda p: p.context, tube.parts)] == [
        0, 0, 0, 0], "no commit of either retried a conflict"


def test_a_sub_queue_lives_in_one_shard_and_keeps_its_order(sq: Queue,
                                                            spark: SparkSession) -> None:
    t = sq.create_tube("u", "utubettl", shards=2)
    rows = spark.createDataFrame([(q, i) for i in range(3) for q in "abcd"], "q string, i int")
    put = t.put(rows, utube=F.col("q")).collect()
    alone = ids(t.put([{"q": "-", "i": 0}, {"q": "-", "i": 1}]))  # no sub-queue: one, shard 0
    assert [i % 2 for i in alone] == [0, 0]
    for r in put:
        assert r["task_id"] % 2 == utube_shard(r["utube"], 2)
    assert t.put({"q": "e", "i": 0}, utube="e").task_id % 2 == utube_shard("e", 2)
    order: dict[str, list[int]] = {}
    while True:
        batch = t.take(10)  # window 1: one task per free sub-queue
        got = batch.collect()
        if not got:
            break
        for r in got:
            order.setdefault(r["utube"], []).append(r["data"]["i"])
        assert len({r["utube"] for r in got}) == len(got)
        t.ack(batch)
    assert order == {"a": [0, 1, 2], "b": [0, 1, 2], "c": [0, 1, 2], "d": [0, 1, 2],
                     "e": [0], None: [0, 1]}


def test_consumer_sweeper_sink_and_drop_on_a_sharded_tube(
        sq: Queue, spark: SparkSession, clock: FakeClock, root: str, tmp_path: Path) -> None:
    t = sq.create_tube("t", "fifottl", shards=2, ttr=10, change_feed=True)
    landing = tmp_path / "landing"
    landing.mkdir()
    for f in range(2):
        (landing / f"{f}.json").write_text("".join(f'{{"n": {f * 3 + r}}}\n' for r in range(3)))
    query = t.sink(spark.readStream.schema("n long").option("maxFilesPerTrigger", 1)
                   .json(str(landing)), str(tmp_path / "ckpt"), trigger={"availableNow": True})
    query.awaitTermination()
    assert t.statistics()["tasks"]["ready"] == 6
    assert {len(p.tasks_by_state("ready").collect()) for p in t.parts} == {3}, \
        "two micro-batches, two shards"
    leased = ids(t.take(1))
    clock.advance(20)  # its lease ends
    assert sq.sweep("t")["ttr"] == 1
    done: list[int] = []

    def handle(batch: object) -> None:
        done.extend(ids(batch))

    progress = Consumer(t, handle, batch_size=2, take_timeout=0, idle_timeout=0).run()
    assert progress.done == 6 and sorted(done) == sorted(set(done)) and leased[0] in done
    assert t.statistics()["tasks"]["total"] == 0
    query = (t.changes(starting_version=0).writeStream.format("memory")
             .queryName("sharded_changes").trigger(availableNow=True).start())
    query.awaitTermination()
    events = spark.table("sharded_changes").groupBy("event").agg(
        F.sort_array(F.collect_set("task_id")).alias("ids")).collect()
    assert {r["event"]: list(r["ids"]) for r in events if r["event"] != "sweep"} == {
        "put": sorted(done), "take": sorted(done), "delete": sorted(done)}
    t.drop()
    assert not (Path(root) / "tubes" / "t").exists() and sq.tubes() == []
