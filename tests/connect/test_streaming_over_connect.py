"""Streaming in and consumers out, as a Spark Connect client runs them: the sink's
micro-batches are put by the server's Python worker, exactly once across a
restart; the change feed; a Consumer's drain."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from sparkqueue import Consumer, FakeClock, Queue

from ..conftest import ids
from ..streaming.test_streaming import json_files


def test_a_sink_over_connect_puts_every_row_once_and_resumes(
        sq: Queue, spark: SparkSession, tmp_path: Path) -> None:
    t = sq.create_tube("feed", "utubettl")
    source, checkpoint = tmp_path / "landing", tmp_path / "ckpt"
    first = json_files(source, files=2, rows=3)
    stream = spark.readStream.schema("n long").json(str(source))
    by_parity = (F.col("n") % 2).cast("string")
    t.sink(stream, str(checkpoint), trigger={"availableNow": True}, utube=by_parity,
           ttl=100).awaitTermination()
    more = json_files(source, files=1, rows=3, first=100)
    t.sink(stream, str(checkpoint), trigger={"availableNow": True}, utube=by_parity,
           ttl=100).awaitTermination()
    rows = t.tasks_by_state("ready").select("data.n", "utube", "ttl").collect()
    assert sorted(r["n"] for r in rows) == sorted(first + more), "every row exactly once"
    assert {(r["n"] % 2, r["utube"], r["ttl"]) for r in rows} == {(0, "0", 100.0),
                                                                   (1, "1", 100.0)}


def test_changes_and_a_consumer_over_connect(sq: Queue, spark: SparkSession,
                                             clock: FakeClock) -> None:
    t = sq.create_tube("q", "fifottl", change_feed=True)
    t.put([{"n": i} for i in range(6)])
    done: list[int] = []

    def handle(batch):  # type: ignore[no-untyped-def]
        got = [r["task_id"] for r in batch.collect()]
        done.extend(got)
        return [i for i in got if i == 5]  # 5 fails: released, then taken again

    progress = Consumer(t, handle, batch_size=4, take_timeout=0, idle_timeout=0).run()
    assert (progress.done, progress.failed) == (5, 1)
    assert sorted(set(done)) == list(range(6))
    assert ids(t.tasks_by_state("ready")) == [5] or ids(t.tasks_by_state("delayed")) == [5]
    query = (t.changes(starting_version=0).writeStream.format("memory")
             .queryName("changes_q").trigger(availableNow=True).start())
    query.awaitTermination()
    events = spark.table("changes_q").groupBy("event").count().collect()
    assert {r["event"]: r["count"] for r in events}["put"] == 6
