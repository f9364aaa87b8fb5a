"""Streaming sinks feed tubes exactly once; the change feed; the consumer loop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

import sparkqueue
from sparkqueue import (
    Consumer,
    FakeClock,
    InvalidOption,
    NotOwner,
    NotSupported,
    Queue,
    StorageError,
    Timeout,
    worker,
)
from sparkqueue import store as st
from sparkqueue.engine import shards
from sparkqueue.engine.ingest import ingest
from sparkqueue.engine.records import live_tasks
from sparkqueue.engine.take import take
from sparkqueue.engine.take import take_once as take_once_of_the_engine
from tests.conftest import ids, versions

from ..jvm import short_lived

HERE = Path(__file__).parent


def json_files(folder: Path, files: int, rows: int, first: int = 0) -> list[int]:
    """``files`` JSON files of ``rows`` rows each, numbered from ``first``; the numbers."""
    folder.mkdir(parents=True, exist_ok=True)
    numbers = []
    for f in range(files):
        lines = [first + f * rows + r for r in range(rows)]
        (folder / f"part-{first + f:05d}.json").write_text(
            "".join(json.dumps({"n": n}) + "\n" for n in lines))
        numbers += lines
    return numbers


def feeder(root: str, tube: str, source: Path, checkpoint: Path) -> subprocess.Popen[str]:
    env = short_lived(PYTHONPATH=str(HERE.parent.parent))
    return subprocess.Popen(
        [sys.executable, str(HERE / "feeder.py"), root, tube, str(source), str(checkpoint)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def numbers_in(sq: Queue, tube: str) -> list[int]:
    rows = live_tasks(sq.tube(tube).context, 0.0).select("data.n").collect()
    return sorted(r[0] for r in rows)


@pytest.mark.slow
def test_sink_puts_every_row_once_across_a_sigkill_and_a_restart(
        sq: Queue, root: str, tmp_path: Path) -> None:
    sq.create_tube("feed", "fifottl")
    source, checkpoint = tmp_path / "landing", tmp_path / "ckpt"
    expected = json_files(source, files=5, rows=4)
    # killed right after the second batch's put committed, before the checkpoint
    # recorded that batch (the first batch is recorded): the restart replays it
    job = feeder(root, "feed", source, checkpoint)
    assert job.stdout is not None
    seen, puts = [], 0
    for line in job.stdout:
        seen.append(line)
        puts += line.strip() == "put"
        if puts == 2:
            job.send_signal(signal.SIGKILL)
            break
    job.wait(timeout=120)
    assert job.returncode == -signal.SIGKILL, "".join(seen)
    job = feeder(root, "feed", source, checkpoint)
    out, _ = job.communicate(timeout=300)
    assert job.returncode == 0 and "finished" in out, out
    assert numbers_in(sq, "feed") == expected, "every source row exactly once"


def test_sink_with_a_processing_time_trigger_resumes_from_its_checkpoint(
        sq: Queue, spark: SparkSession, tmp_path: Path) -> None:
    t = sq.create_tube("feed", "utube")
    source, checkpoint = tmp_path / "landing", tmp_path / "ckpt"
    first = json_files(source, files=2, rows=3)
    stream = spark.readStream.schema("n long").json(str(source))
    query = t.sink(stream, str(checkpoint), trigger={"processingTime": "1 second"},
                   utube=(stream["n"] % 2).cast("string"))
    query.processAllAvailable()
    query.stop()
    more = json_files(source, files=1, rows=3, first=100)
    query = t.sink(stream, str(checkpoint), trigger={"availableNow": True},
                   utube=(stream["n"] % 2).cast("string"))
    query.awaitTermination()
    assert numbers_in(sq, "feed") == sorted(first + more)
    assert sorted({r["utube"] for r in t.tasks_by_state("ready").collect()}) == ["0", "1"]
    with pytest.raises(InvalidOption, match="streaming DataFrame"):
        t.sink(spark.range(3), str(checkpoint))
    with pytest.raises(InvalidOption, match="ttl"):
        t.sink(stream, str(checkpoint), ttl=5)


def test_change_feed_reports_each_transition(sq: Queue, spark: SparkSession) -> None:
    t = sq.create_tube("t", "fifottl", change_feed=True)
    t.put([{"n": 0}, {"n": 1}, {"n": 2}])
    assert ids(t.take(2)) == [0, 1]
    t.ack(0)
    t.bury(1)
    query = (t.changes(starting_version=0).writeStream.format("memory")
             .queryName("changes_t").trigger(availableNow=True).start())
    query.awaitTermination()
    got = spark.table("changes_t").select("task_id", "status", "event", "owner")
    expected = spark.createDataFrame(
        [(0, "ready", "put", None), (1, "ready", "put", None), (2, "ready", "put", None),
         (0, "taken", "take", "consumer-a"), (1, "taken", "take", "consumer-a"),
         (0, "done", "delete", "consumer-a"), (1, "buried", "bury", None)],
        got.schema)
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)
    with pytest.raises(InvalidOption, match="starting_version"):
        t.changes(starting_version=-1)


def feed_property(spark: SparkSession, t: sparkqueue.Tube) -> str | None:
    """The tasks table's ``delta.enableChangeDataFeed`` property, as DESCRIBE DETAIL gives it."""
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{t.context.layout.tasks(t.name)}`").first()
    assert detail is not None
    value = detail["properties"].get("delta.enableChangeDataFeed")
    return None if value is None else str(value)


def test_a_start_before_the_feed_is_refused_before_it_is_turned_on(
        sq: Queue, spark: SparkSession) -> None:
    t = sq.create_tube("t", "fifottl")
    t.put({"n": 0})
    tasks = t.context.layout.tasks("t")
    before = t.context.layout.latest_version(tasks)
    with pytest.raises(InvalidOption, match="keeps no change feed yet"):
        t.changes(starting_version=before)
    assert feed_property(spark, t) == "false", "the feed is still off"
    assert t.context.layout.latest_version(tasks) == before, "nothing written"


def test_a_sharded_tube_refuses_a_start_before_any_shard_turns_its_feed_on(
        sq: Queue, spark: SparkSession) -> None:
    t = sq.create_tube("s", "fifottl", shards=2)
    t.parts[1].put([{"n": i} for i in range(2)])  # the second shard's alone
    t.parts[1].take(2)  # commits on the second shard's tasks table only

    def state() -> list[tuple[int, bool]]:
        out = []
        for part in t.parts:
            ref = part.context.layout.tasks(part.context.key)
            out.append((part.context.layout.latest_version(ref), st.keeps_feed(spark, ref)))
        return out

    before = state()
    (first, _), (second, _) = before
    assert first < second and not any(on for _, on in before)
    with pytest.raises(InvalidOption, match="keeps no change feed yet"):
        t.changes(starting_version=first + 1)  # after the first shard's, not the second's
    assert state() == before, "no shard's feed turned on, nothing written"


def test_a_tube_keeps_no_feed_until_changes_turns_it_on_from_then(
        sq: Queue, spark: SparkSession) -> None:
    t = sq.create_tube("t", "fifottl")
    t.put([{"n": 0}, {"n": 1}])
    assert ids(t.take(2)) == [0, 1]
    assert feed_property(spark, t) == "false", "no feed written for the put and the take"
    stream = t.changes()  # turns the feed on: one commit, no data changed
    assert stream.isStreaming and feed_property(spark, t) == "true"
    on = t.context.layout.latest_version(t.context.layout.tasks("t"))
    with pytest.raises(InvalidOption, match=f"from version {on} on"):
        t.changes(starting_version=on - 1)
    t.ack(0)
    t.bury(1)
    assert t.changes() is not None, "a second call changes nothing"
    assert t.context.layout.latest_version(t.context.layout.tasks("t")) == on + 2
    query = (t.changes(starting_version=on).writeStream.format("memory")
             .queryName("changes_from_on").trigger(availableNow=True).start())
    query.awaitTermination()
    got = spark.table("changes_from_on").select("task_id", "status", "event")
    expected = spark.createDataFrame([(0, "done", "delete"), (1, "buried", "bury")], got.schema)
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def test_a_take_while_changes_turns_the_feed_on_still_shows_its_tasks_leave(
        sq: Queue, spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another consumer's take between changes()'s settle of lease records and the
    commit that turns the feed on leaves a record: it is written out once the
    feed is on, so the batch's ack shows in the feed (a record's own removal
    would not)."""
    t = sq.create_tube("t", "fifottl")
    t.put([{"n": 0}, {"n": 1}])
    turn_on = st.keep_feed
    taken: list[DataFrame] = []

    def another_take_first(session: SparkSession, ref: str) -> None:
        if not taken:
            taken.append(t.take(2, owner="consumer-b"))
        turn_on(session, ref)

    monkeypatch.setattr(st, "keep_feed", another_take_first)
    t.changes()
    monkeypatch.undo()
    on = st.feed_start(spark, t.context.layout.tasks("t"))
    assert ids(t.ack(taken[0], owner="consumer-b")) == [0, 1]
    query = (t.changes(starting_version=on).writeStream.format("memory")
             .queryName("changes_raced").trigger(availableNow=True).start())
    query.awaitTermination()
    got = spark.table("changes_raced").select("task_id", "status", "event")
    expected = spark.createDataFrame(
        [(0, "taken", "take"), (1, "taken", "take"), (0, "done", "delete"),
         (1, "done", "delete")], got.schema)
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def test_a_changes_stream_started_before_the_first_put_stops_at_its_payload_column(
        sq: Queue, spark: SparkSession) -> None:
    t = sq.create_tube("t", "fifottl", change_feed=True)
    query = t.changes().writeStream.format("memory").queryName("changes_early").start()
    try:
        query.processAllAvailable()
        t.put([{"n": 0}])  # gives the tasks table its payload column: a schema change
        with pytest.raises(StreamingQueryException, match="(?i)schema"):
            query.processAllAvailable()
    finally:
        query.stop()
    assert ids(t.take(1)) == [0]
    again = (t.changes(starting_version=0).writeStream.format("memory")
             .queryName("changes_restarted").trigger(availableNow=True).start())
    again.awaitTermination()  # started again, it reads on in the new schema
    got = spark.table("changes_restarted").select("task_id", "status", "data.n")
    expected = spark.createDataFrame([(0, "ready", 0), (0, "taken", 0)], got.schema)
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)


def test_a_tube_without_change_feed_keeps_none_and_refuses_changes(
        sq: Queue, spark: SparkSession) -> None:
    with pytest.raises(InvalidOption, match="change_feed must be a bool or None"):
        sq.create_tube("t", change_feed="no")  # type: ignore[arg-type]
    assert sq.tubes() == []
    t = sq.create_tube("t", "fifottl", change_feed=False)
    t.put([{"n": 0}, {"n": 1}])
    assert ids(t.take(2)) == [0, 1]
    done = t.ack(0).select("task_id", "status", "data.n")
    assert_df_equality(done, spark.createDataFrame([(0, "done", 0)], done.schema))
    assert feed_property(spark, t) == "false"
    for tube in (t, sparkqueue.connect(spark, sq.root).tube("t")):  # kept in the registry
        with pytest.raises(NotSupported, match="change_feed=False"):
            tube.changes()


def test_consumer_acks_retries_with_growing_delays_then_buries(
        sq: Queue, clock: FakeClock) -> None:
    t = sq.create_tube("jobs", "fifottl")
    t.put([{"n": i} for i in range(6)])

    def odd_ones_fail(batch):  # type: ignore[no-untyped-def]
        return [r["task_id"] for r in batch.collect() if r["data"]["n"] % 2]

    reports: list[str] = []
    consumer = Consumer(t, odd_ones_fail, batch_size=10, max_attempts=3, retry_delay=10,
                        take_timeout=0, idle_timeout=0, report=lambda p: reports.append(str(p)))
    first = consumer.run()
    assert (first.done, first.failed, first.buried) == (3, 3, 0)
    assert reports and reports[-1].startswith("done=3 failed=3 buried=0")
    assert t.meta(1)["status"] == "delayed" and t.meta(1)["event"] == clock() + 10
    clock.advance(10)
    second = consumer.run()
    assert (second.done, second.failed, second.buried) == (0, 3, 0)
    assert t.meta(1)["event"] == clock() + 20, "the delay doubles per attempt"
    clock.advance(20)
    third = consumer.run()
    assert (third.done, third.failed, third.buried) == (0, 0, 3)
    assert ids(t.tasks_by_state("buried")) == [1, 3, 5]
    assert t.statistics()["calls"]["ack"] == 3


def test_a_consumer_acks_each_batch_in_the_next_take_s_commit(sq: Queue) -> None:
    """What Consumer runs between batches: the acks of the batch done and the next
    take, one MERGE; all or nothing, counted and announced as the two verbs."""
    t = sq.create_tube("pair", "fifottl")
    t.put([{"n": i} for i in range(5)])
    events: list[tuple[str, list[int]]] = []
    t.on_task_change(lambda df, event: events.append((event, ids(df))))
    first = ids(t.take(2))
    before = versions(t)
    assert ids(take(t.context, 2, 0.0, sq.owner, 1, acking=first)) == [2, 3]
    assert versions(t) == (before[0], before[1] + 1), "one commit"
    assert events[-2:] == [("ack", [0, 1]), ("take", [2, 3])]
    calls = t.statistics()["calls"]
    assert (calls["take"], calls["ack"]) == (4, 2)
    ingest(t.context)  # task 4, which the takes of new puts left in the inbox
    before = versions(t)
    with pytest.raises(NotOwner) as refused:
        take(t.context, 1, 0.0, "intruder", 1, acking=[2, 3])
    assert refused.value.task_ids == [2, 3]
    assert versions(t) == before, "nothing taken, nothing acked"
    assert ids(t.tasks_by_state("ready")) == [4]


def test_a_consumer_whose_leases_ended_records_the_refused_acks_and_goes_on(
        sq: Queue, clock: FakeClock) -> None:
    t = sq.create_tube("slow", "fifottl", ttr=10)
    t.put([{"n": i} for i in range(2)])
    seen: list[list[int]] = []

    def slow_once(batch):  # type: ignore[no-untyped-def]
        seen.append(ids(batch))
        if len(seen) == 1:
            clock.advance(11)  # the handler outlived the leases: others may hold the tasks

    progress = Consumer(t, slow_once, batch_size=2, take_timeout=0, idle_timeout=0).run()
    assert seen == [[0, 1], [0, 1]], "refused acks, so the tasks came back (at-least-once)"
    assert "InvalidState" in (progress.last_error or "")
    assert progress.done == 2 and t.statistics()["calls"]["ack"] == 2


def test_a_consumer_whose_take_kept_conflicting_records_it_and_takes_again(
        sq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """Consumers of one shard race for its head: a take may lose every try until the
    tube's conflict timeout. It took nothing; the consumer goes on, not idle."""
    t = sq.create_tube("crowded", "fifottl")
    t.put([{"n": i} for i in range(2)])
    original = shards.take_any
    lost: list[int] = []

    def take_any(*args, **kwargs):  # type: ignore[no-untyped-def]
        if not lost:  # the first take loses to other consumers' commits every time
            lost.append(1)
            raise Timeout("take on 'crowded' kept conflicting with concurrent commits")
        return original(*args, **kwargs)

    monkeypatch.setattr(shards, "take_any", take_any)
    progress = Consumer(t, lambda batch: None, batch_size=2, take_timeout=0,
                        idle_timeout=0).run()
    assert progress.done == 2 and lost == [1]
    assert "Timeout" in (progress.last_error or "")
    assert t.statistics()["tasks"]["done"] == 2


def test_a_consumer_whose_take_with_acks_kept_conflicting_still_acks_the_batch(
        sq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """The take that carries the previous batch's acks loses every try: the acks are
    committed on their own, and the next take goes on; nothing is left leased."""
    t = sq.create_tube("acking", "fifottl")
    t.put([{"n": i} for i in range(4)])
    original = take_once_of_the_engine
    lost: list[list[int]] = []

    def take_once(ctx, n, who, win, acking=None, *rest):  # type: ignore[no-untyped-def]
        if acking and not lost:
            lost.append(list(acking))
            raise Timeout("take on 'acking' kept conflicting with concurrent commits")
        return original(ctx, n, who, win, acking, *rest)

    monkeypatch.setattr(worker, "take_once", take_once)
    progress = Consumer(t, lambda batch: None, batch_size=2, take_timeout=0,
                        idle_timeout=0).run()
    assert lost == [[0, 1]], "the second batch's take carried the first batch's acks"
    assert progress.done == 4
    stats = t.statistics()["tasks"]
    assert stats["done"] == 4 and stats["taken"] == 0


def test_a_consumer_keeps_the_acks_a_failing_storage_refused_for_its_next_take(
        sq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """The storage fails the take that carries the previous batch's acks, and an ack
    alone would fail too: the acks are not dropped (their tasks handed out again
    once their leases end) but carried by the next take. Each task is handled
    once, every one is done, none is left leased."""
    t = sq.create_tube("flaky", "fifottl")
    t.put([{"n": i} for i in range(4)])
    original = take_once_of_the_engine
    failed: list[list[int]] = []
    seen: list[list[int]] = []

    def take_once(ctx, n, who, win, acking=None, *rest):  # type: ignore[no-untyped-def]
        if acking and not failed:
            failed.append(list(acking))
            raise StorageError(ctx.name, "S3 answered 503 Slow Down", transient=True)
        return original(ctx, n, who, win, acking, *rest)

    def ack_down(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise StorageError("flaky", "S3 answered 503 Slow Down", transient=True)

    monkeypatch.setattr(worker, "take_once", take_once)
    monkeypatch.setattr(t, "ack", ack_down)  # the storage is down for an ack alone too
    progress = Consumer(t, lambda batch: seen.append(ids(batch)), batch_size=2,
                        take_timeout=0, idle_timeout=0).run()
    assert failed == [[0, 1]] and seen == [[0, 1], [2, 3]], "each task handled once"
    assert "StorageError" in (progress.last_error or "") and progress.done == 4
    stats = t.statistics()["tasks"]
    assert stats["done"] == 4 and stats["taken"] == 0


def test_a_consumer_whose_take_with_acks_lost_its_answer_finds_the_acks_gone(
        sq: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """The take that carries the acks commits, and the storage loses its answer: the
    next take carries them again and is refused (they are gone), which is recorded;
    ``done`` leaves them out. The tasks that take leased unseen stay leased until
    their leases end, as a killed consumer's do."""
    t = sq.create_tube("lost", "fifottl")
    t.put([{"n": i} for i in range(4)])
    original = take_once_of_the_engine
    lost: list[list[int]] = []

    def take_once(ctx, n, who, win, acking=None, *rest):  # type: ignore[no-untyped-def]
        taken = original(ctx, n, who, win, acking, *rest)
        if acking and not lost:
            lost.append(list(acking))
            raise StorageError(ctx.name, "the connection dropped", transient=True)
        return taken

    monkeypatch.setattr(worker, "take_once", take_once)
    progress = Consumer(t, lambda batch: None, batch_size=2, take_timeout=0,
                        idle_timeout=0).run()
    assert lost == [[0, 1]] and progress.done == 0
    assert "TaskNotFound" in (progress.last_error or "")
    stats = t.statistics()["tasks"]
    assert stats["done"] == 2 and stats["taken"] == 2


def test_consumer_stops_on_sigterm_and_a_raising_handler_fails_its_batch(sq: Queue) -> None:
    t = sq.create_tube("q", "fifo")
    t.put([{"n": i} for i in range(4)])
    before = signal.getsignal(signal.SIGTERM)

    def boom(batch):  # type: ignore[no-untyped-def]
        os.kill(os.getpid(), signal.SIGTERM)  # what a scheduler sends a worker
        raise RuntimeError("boom")

    progress = Consumer(t, boom, batch_size=2, take_timeout=0, idle_timeout=None).run()
    assert progress.batches == 1, "stopped after the batch in hand"
    assert (progress.done, progress.failed) == (0, 2) and "boom" in (progress.last_error or "")
    assert signal.getsignal(signal.SIGTERM) == before, "the previous handler is back"
    stats = t.statistics()
    assert stats["tasks"]["ready"] == 4 and stats["calls"]["release"] == 2
    with pytest.raises(InvalidOption, match="batch_size"):
        Consumer(t, boom, batch_size=0)
    assert sparkqueue.Progress().done == 0
