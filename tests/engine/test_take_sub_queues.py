"""The accelerator's take of sub-queue heads: one Spark job chooses the heads of free
sub-queues on the transaction's snapshot, one commit rewrites the files that hold
them (the leased tasks into files of their own, which their ack removes whole).
Same answers as the MERGE: heads of free sub-queues only, in order, a lease
that ended counted as a ttr expiry, never a sub-queue leased twice.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import sparkqueue
from sparkqueue import Consumer, FakeClock, Queue, Tube, UtubeDriver, store
from sparkqueue.engine import ops
from sparkqueue.engine import take as taking
from sparkqueue.engine.ingest import ingest

from ..conftest import commit_infos, ids, known_ids, operations, spark_jobs
from .test_take_files import before_its_commit, files_of


@pytest.fixture(autouse=True)
def with_statistics(monkeypatch: pytest.MonkeyPatch) -> None:
    """File statistics even for a table of a few files."""
    monkeypatch.setattr(store.schema, "FEW_FILES", 0)


def ingested(sq: Queue, name: str, queues: dict[str, int], kind: str = "utube",
             **options: Any) -> tuple[Tube, dict[str, list[int]]]:
    """A tube of ``kind`` with ``queues[q]`` tasks put in sub-queue ``q``, ingested
    (so that a take chooses among task rows, not new puts) and its file statistics
    read once; the ids by sub-queue."""
    t = sq.create_tube(name, kind, **options)
    rows = [{"q": q, "i": i} for q, count in queues.items() for i in range(count)]
    put = t.put(rows, utube=F.col("q")).collect()
    ingest(t.context)
    layout = t.context.layout
    layout.file_stats(layout.tasks(name))
    by_queue: dict[str, list[int]] = {q: [] for q in queues}
    for r in sorted(put, key=lambda r: r["task_id"]):
        by_queue[r["data"]["q"]].append(r["task_id"])
    return t, by_queue


def test_a_take_leases_the_heads_of_free_sub_queues_in_one_commit_of_whole_files(
        sq: Queue) -> None:
    t, q = ingested(sq, "heads", {"a": 2, "b": 1, "c": 2})
    path = t.context.layout.tasks("heads")
    before = t.context.layout.latest_version(path)
    batch = t.take(5)
    assert ids(batch) == sorted([q["a"][0], q["b"][0], q["c"][0]])
    assert {r["status"] for r in batch.collect()} == {"taken"}
    assert operations(t, before) == [("UPDATE", "take")], "no MERGE"
    leased = [f for f in files_of(t) if f[0] == "taken"]
    assert sum(hi - lo + 1 for _, _, lo, hi in leased) >= 3 and all(
        f[1] == "taken" for f in leased), "the leased tasks are files of their own"

    before = t.context.layout.latest_version(path)
    assert ids(t.ack(batch)) == ids(batch)
    assert operations(t, before) == [("DELETE", "ack")], "removed whole"
    assert ids(t.take(5)) == sorted([q["a"][1], q["c"][1]])
    stats = t.statistics()
    assert stats["calls"]["take"] == 5 and stats["tasks"]["taken"] == 2


def test_a_take_where_every_sub_queue_is_busy_finds_nothing_and_commits_nothing(
        sq: Queue) -> None:
    t, q = ingested(sq, "busy", {"a": 2, "b": 2})
    assert ids(t.take(5, owner="other")) == [q["a"][0], q["b"][0]]
    path = t.context.layout.tasks("busy")
    before = t.context.layout.latest_version(path)
    assert t.take(5, timeout=0).count() == 0
    assert operations(t, before) == []


def test_a_lease_that_ended_frees_its_sub_queue_and_counts_as_a_ttr_expiry(
        sq: Queue, clock: FakeClock) -> None:
    t, q = ingested(sq, "ttr", {"a": 2, "b": 1}, kind="utubettl", ttr=10)
    assert ids(t.take(1, owner="other")) == [q["a"][0]]
    assert ids(t.take(5)) == [q["b"][0]], "a is busy"
    clock.advance(11)  # both leases end
    path = t.context.layout.tasks("ttr")
    before = t.context.layout.latest_version(path)
    assert ids(t.take(5, owner="third")) == [q["a"][0], q["b"][0]]
    assert operations(t, before) == [("UPDATE", "take")]
    assert commit_infos(t)[before + 1]["tag"]["ttr"] == 2
    assert t.statistics()["calls"]["ttr"] == 2


def test_a_consumer_of_sub_queues_pays_one_commit_a_batch(sq: Queue) -> None:
    t, q = ingested(sq, "loop", {"a": 2, "b": 2})
    path = t.context.layout.tasks("loop")
    before = t.context.layout.latest_version(path)
    seen: list[list[int]] = []
    progress = Consumer(t, lambda batch: seen.append(ids(batch)), batch_size=10,
                        take_timeout=0, idle_timeout=0).run()
    assert seen == [[q["a"][0], q["b"][0]], [q["a"][1], q["b"][1]]] and progress.done == 4
    assert operations(t, before) == [("UPDATE", "take"), ("UPDATE", "take+ack"),
                                     ("DELETE", "ack")]


def test_a_take_whose_snapshot_another_take_changed_leases_no_sub_queue_twice(
        sq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    t, q = ingested(sq, "race", {"a": 2, "b": 2})
    stolen: list[list[int]] = []
    before_its_commit(t, monkeypatch,
                      lambda: stolen.append(ids(t.take(1, owner="consumer-b"))))
    retried = t.context.conflicts
    assert ids(t.take(5)) == [q["b"][0]], "after the conflict: a is busy"
    assert stolen == [[q["a"][0]]]
    assert t.context.conflicts == retried + 1
    assert t.meta(q["a"][0])["owner"] == "consumer-b"
    assert ids(t.tasks_by_state("ready")) == [q["a"][1], q["b"][1]]


class _BusyOnce(UtubeDriver):
    """A driver whose first choice is every ready task, busy sub-queues or not (a
    choice made on a snapshot before another consumer's lease); then as utube."""

    name: ClassVar[str] = "busy_once"
    sub_queue_heads: ClassVar[bool] = True  # the promise its choice breaks once
    fooled: ClassVar[list[bool]] = []

    def choose(self, live: DataFrame, n: int, window: int) -> DataFrame:
        if not type(self).fooled:
            type(self).fooled.append(True)
            return live.where("eff = 'ready'").orderBy("task_id").limit(n)
        return super().choose(live, n, window)


def test_a_drivers_choice_of_a_busy_sub_queue_goes_to_the_merge_which_chooses_again(
        sq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    sq.register_driver("busy_once", _BusyOnce)
    t, q = ingested(sq, "stale", {"a": 2, "b": 1}, kind="busy_once")
    assert ids(t.take(1, owner="other")) == [q["a"][0]]
    _BusyOnce.fooled.clear()
    path = t.context.layout.tasks("stale")
    before = t.context.layout.latest_version(path)
    plans = spied(monkeypatch, "choose_heads")
    assert ids(t.take(5)) == [q["b"][0]], "a's second task is not leased: a is busy"
    assert _BusyOnce.fooled == [True]
    assert plans == [("key", None), None], "the file take saw the busy choice, gave it up"
    assert [op for op, _ in operations(t, before)] == ["MERGE"]


def spied(monkeypatch: pytest.MonkeyPatch, name: str) -> list[Any]:
    """What ``engine.take.<name>`` returns each time it is called from now on, after
    its ``key`` argument (the head's bound) where it has one."""
    seen: list[Any] = []
    original = getattr(taking, name)

    def spy(*args: Any, **kwargs: Any) -> Any:
        got = original(*args, **kwargs)
        if name == "choose_heads":
            seen.append(("key", args[7] if len(args) > 7 else kwargs.get("key")))
        seen.append(None if got is None else got.leases)
        return got

    monkeypatch.setattr(taking, name, spy)
    return seen


def test_on_a_long_tube_a_take_reads_near_the_head_and_still_sees_every_lease(
        sq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``HEAD_READ_ROWS`` the take reads the ready tasks within the head's bound
    and every lease: a sub-queue leased past the bound is busy, and when the
    bound holds fewer than ``n`` free heads the take chooses from all."""
    monkeypatch.setattr(store.schema, "HEAD_READ_ROWS", 0)
    t, q = ingested(sq, "long", {"a": 1}, kind="utubettl", pri=9)
    assert ids(t.take(1)) == q["a"]  # a's lease, past the bound of what follows
    first, other = ids(t.put([{"q": "a", "i": 1}, {"q": "b", "i": 0}], utube=F.col("q"),
                             pri=0))
    ingest(t.context)
    calls = spied(monkeypatch, "choose_heads")
    assert ids(t.take(1)) == [other], "first is ahead, but a is busy"
    assert calls[0][1] is not None and calls[1] == 1, "one read, near the head"

    more = ids(t.put([{"q": "c", "i": 0}], utube="c", pri=5))
    ingest(t.context)
    calls.clear()
    assert ids(t.take(2)) == more, "near the head only a's (busy): then from all"
    assert [c for c in calls if isinstance(c, tuple)][-1] == ("key", None)
    assert ids(t.tasks_by_state("ready")) == [first]


def test_a_file_with_a_deletion_vector_sends_the_take_to_the_merge(
        sq: Queue, spark: SparkSession) -> None:
    """A deletion vector leaves a file's statistics unknown and its Parquet holding the
    rows it deleted: read as Parquet they would come back, so the MERGE takes."""
    t, q = ingested(sq, "vectors", {"a": 2, "b": 2, "c": 1})
    path = t.context.layout.tasks("vectors")
    spark.sql(f"ALTER TABLE delta.`{path}` "
              "SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    t.bury(q["b"][0])  # a MERGE that marks the ready row deleted in its file
    before = t.context.layout.latest_version(path)
    assert ids(t.take(5)) == [q["a"][0], q["b"][1], q["c"][0]]
    assert t.meta(q["b"][0])["status"] == "buried"
    assert [op for op, _ in operations(t, before)] == ["MERGE"]


def test_a_tube_that_keeps_a_change_feed_takes_by_merge(sq: Queue) -> None:
    t, q = ingested(sq, "feed", {"a": 2, "b": 1}, change_feed=True)
    path = t.context.layout.tasks("feed")
    before = t.context.layout.latest_version(path)
    assert ids(t.take(5)) == [q["a"][0], q["b"][0]]
    assert [op for op, _ in operations(t, before)] == ["MERGE"]


def test_an_ack_from_another_process_goes_the_merges_way(
        sq: Queue, spark: SparkSession, root: str, clock: FakeClock) -> None:
    """Only the process that took heads that are not a run of ids knows that their
    files hold them alone; another one's ack reads and checks them."""
    t, q = ingested(sq, "elsewhere", {"a": 2, "b": 1})
    batch = t.take(5)
    assert ids(batch) == [q["a"][0], q["b"][0]]
    # a Queue of its own (its own Layout): it has noted no leases
    other = sparkqueue.connect(spark, root, owner="consumer-a", clock=clock)
    path = t.context.layout.tasks("elsewhere")
    before = t.context.layout.latest_version(path)
    assert ids(other.tube("elsewhere").ack(ids(batch))) == ids(batch)
    assert [op for op, _ in operations(t, before)] == ["MERGE"]
    assert ids(t.take(5)) == [q["a"][1]]


def test_a_take_that_finds_every_sub_queue_busy_does_not_try_the_merge_too(
        sq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    t, q = ingested(sq, "nomerge", {"a": 2, "b": 2})
    assert ids(t.take(5, owner="other")) == [q["a"][0], q["b"][0]]
    merges: list[int] = []

    def apply(*args: Any, **kwargs: Any) -> Any:  # the MERGE's way (engine.take's binding)
        merges.append(1)
        return ops.apply(*args, **kwargs)

    monkeypatch.setattr(taking, "apply", apply)
    assert t.take(5, timeout=0).count() == 0
    assert merges == []


def test_a_window_of_two_leases_two_heads_of_each_free_sub_queue_in_one_commit(
        sq: Queue) -> None:
    t, q = ingested(sq, "window", {"a": 3, "b": 1, "c": 3})
    path = t.context.layout.tasks("window")
    before = t.context.layout.latest_version(path)
    batch = t.take(10, window=2)
    assert ids(batch) == sorted(q["a"][:2] + q["b"] + q["c"][:2])
    assert operations(t, before) == [("UPDATE", "take")]
    assert ids(t.take(10, window=2, owner="other")) == [], "every sub-queue is busy"
    t.ack(batch)
    assert ids(t.take(10, window=2)) == [q["a"][2], q["c"][2]]


def test_a_take_of_new_puts_writes_its_heads_apart_so_their_ack_removes_whole_files(
        sq: Queue) -> None:
    """The first take of a new tube ingests its puts and leases in one commit; the
    heads chosen (not a run of ids: each sub-queue's tasks were put together) go
    into files of their own, so the ack is a DELETE of whole files, not a MERGE."""
    t = sq.create_tube("fresh_heads", "utube")
    put = t.put([{"q": q, "i": i} for q in "abc" for i in range(3)], utube=F.col("q"))
    first = {q: min(r["task_id"] for r in put.collect() if r["data"]["q"] == q) for q in "abc"}
    path = t.context.layout.tasks("fresh_heads")
    before = t.context.layout.latest_version(path)
    batch = t.take(3)
    assert ids(batch) == sorted(first.values())
    assert [op for _, op in operations(t, before)] == ["ingest+take"]
    leased = [f for f in files_of(t) if f[0] == "taken"]
    assert leased and all(f[1] == "taken" for f in leased), "the heads are files of their own"
    assert sum(hi - lo + 1 for _, _, lo, hi in leased) > 3, "their ids are not a run"

    before = t.context.layout.latest_version(path)
    assert ids(t.ack(batch)) == ids(batch)
    assert operations(t, before) == [("DELETE", "ack")], "removed whole"
    assert ids(t.take(3)) == sorted(v + 1 for v in first.values())
    assert t.statistics()["tasks"]["ready"] == 3


def test_a_shards_sub_queue_takes_and_acks_go_the_one_shard_ways(sq: Queue) -> None:
    """On a sharded utube tube each take is one shard's, as on a tube of one shard:
    the first ingests and leases in one commit, the next rewrites the files that
    hold the heads (not a MERGE), and their acks remove whole files."""
    t = sq.create_tube("sharded_heads", "utube", shards=2)
    t.put([{"q": q, "i": i} for q in "abcdef" for i in range(2)], utube=F.col("q"))
    seen: list[list[str]] = []
    for _ in range(2):
        befores = [p.context.layout.latest_version(p.context.layout.tasks(p.context.key))
                   for p in t.parts]
        batch = t.take(6)
        got = batch.collect()
        assert got and len({r["task_id"] % 2 for r in got}) == 1, "one shard's heads"
        assert len({r["utube"] for r in got}) == len(got), "one head a sub-queue"
        part = t.parts[got[0]["task_id"] % 2]
        t.ack(batch)
        seen.append([op for _, op in operations(part, befores[got[0]["task_id"] % 2])])
        assert operations(part, befores[got[0]["task_id"] % 2])[-1] == ("DELETE", "ack")
    assert seen == [["ingest+take", "ack"], ["take", "ack"]]


def test_a_take_of_sub_queue_heads_runs_two_spark_jobs_the_choice_and_the_write(
        sq: Queue, spark: SparkSession) -> None:
    """The choice is one query over one partition, which holds each sub-queue whole:
    busy sub-queues and ranks come from one window, with no shuffle and no
    broadcast of the busy ones (a job of its own). Then the write."""
    t, q = ingested(sq, "two_jobs", {f"q{i}": 3 for i in range(8)})
    assert ids(t.take(2)) == [q["q0"][0], q["q1"][0]]  # two sub-queues busy
    before = spark_jobs(spark)
    batch = t.take(8)
    jobs = spark_jobs(spark) - before
    assert ids(batch) == [q[f"q{i}"][0] for i in range(2, 8)], "the free sub-queues' heads"
    assert jobs == 2


def test_the_merges_take_writes_down_its_ids_so_its_ack_reads_none(
        sq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """The portable engine's take of ingested sub-queue heads is a MERGE of the ids it
    chose. Where the MERGE changed each of them (Delta's count of rows updated),
    they are its result's ids, a run or not: its ack does not read them again."""
    portable = sparkqueue.connect(sq.spark, sq.root, owner=sq.owner, clock=sq.clock,
                                  engine="portable")
    t, q = ingested(portable, "merged", {"a": 2, "b": 1, "c": 2})
    path = t.context.layout.tasks("merged")
    before = t.context.layout.latest_version(path)
    batch = t.take(5)
    assert operations(t, before) == [("MERGE", "take")]
    heads = sorted([q["a"][0], q["b"][0], q["c"][0]])
    assert known_ids(t, batch) == ids(batch) == heads

    def unread(frame: DataFrame) -> Any:
        raise AssertionError(f"the ack read the ids of {frame}")

    monkeypatch.setattr(store, "column_values", unread)
    assert ids(t.ack(batch)) == heads
    assert known_ids(t, t.take(5, owner="other").where("task_id > 0")) is None, "another frame"
