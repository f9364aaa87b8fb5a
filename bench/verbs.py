"""The benchmark's put, take and drain sections (see bench/__main__.py): each against
a plain Delta table of the same rows, in the same process."""

from __future__ import annotations

import statistics
import time
from functools import partial
from typing import Any

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import sparkqueue
from bench.engines import consume_all, ingest_all, ingested, payload, say, timed

#: What a section writes its figures into.
Figures = dict[str, Any]


def plain_table(spark: SparkSession, path: str, n: int, change_feed: bool = False) -> None:
    """A plain Delta table with one row per task, shaped like a queue (the MERGE baseline);
    with ``change_feed``, Delta's change data feed on (as a tube's tasks table has it)."""
    (payload(spark, n).select(
        F.col("n").alias("id"), F.lit("ready").alias("status"), F.lit(0).cast("long").alias("pri"),
        F.lit(None).cast("string").alias("owner"), F.lit(0.0).alias("lease_end"),
        F.struct("n", "url").alias("data"))
     .write.format("delta").mode("overwrite").save(path))
    if change_feed:
        spark.sql(f"ALTER TABLE delta.`{path}` "
                  "SET TBLPROPERTIES (delta.enableChangeDataFeed = true)")


def plain_take(spark: SparkSession, path: str, n: int) -> None:
    """The hand-written take: MERGE flipping the n lowest-id ready rows."""
    table = DeltaTable.forPath(spark, path)
    chosen = (spark.read.format("delta").load(path).where("status = 'ready'")
              .orderBy("pri", "id").limit(n).select(F.col("id").alias("sid"))
              .localCheckpoint(eager=True))
    (table.alias("t").merge(chosen.alias("s"), "t.id = s.sid")
     .whenMatchedUpdate(condition="t.status = 'ready'",
                        set={"status": "'taken'", "owner": "'bench'",
                             "lease_end": F.lit(time.time() + 60)})
     .execute())


def plain_drain(spark: SparkSession, path: str, n: int) -> int:
    """The hand-written drain: per batch one MERGE that deletes the previous batch (its
    ack) and flips the n lowest-id ready rows (the next take), bounded by the source's
    ids; the last batch's delete comes with the empty take. The number of rows deleted."""
    table = DeltaTable.forPath(spark, path)
    done, taken = 0, spark.createDataFrame([], "sid long")
    while True:
        ready = (spark.read.format("delta").load(path).where("status = 'ready'")
                 .orderBy("pri", "id").limit(n).select(F.col("id").alias("sid")))
        source = (ready.withColumn("ack", F.lit(False))
                  .unionByName(taken.withColumn("ack", F.lit(True)))
                  .localCheckpoint(eager=True))
        row = source.agg(F.min("sid"), F.max("sid"), F.count(F.when(F.col("ack"), 1))).first()
        assert row is not None
        if row[0] is None:
            return done
        (table.alias("t").merge(source.alias("s"),
                                f"t.id = s.sid AND t.id >= {row[0]} AND t.id <= {row[1]}")
         .whenMatchedDelete(condition="s.ack")
         .whenMatchedUpdate(condition="t.status = 'ready'",
                            set={"status": "'taken'", "owner": "'bench'",
                                 "lease_end": F.lit(time.time() + 60)})
         .execute())
        done += int(row[2])
        taken = source.where("NOT ack").select("sid")


def release_all_plain(spark: SparkSession, path: str) -> None:
    DeltaTable.forPath(spark, path).update("status = 'taken'", {"status": "'ready'"})


def drain_all(tube: sparkqueue.Tube, n: int, window: int | None = None) -> int:
    """take(n) + ack until the tube is empty; the number of tasks done."""
    done = 0
    while True:
        batch = tube.take(n, window=window) if window else tube.take(n)
        got = batch.count()
        if not got:
            return done
        tube.ack(batch)
        done += got


def bench_put(spark: SparkSession, sq: sparkqueue.Queue, root: str, rows: DataFrame,
              n_rows: int, repeat: int, figures: Figures) -> None:
    """put of ``rows`` and of one row against plain appends, and the same puts into a
    limfifottl tube against the fifottl puts."""
    say(f"put of {n_rows} rows against a plain append")
    # put against a plain append of the same rows. Both go to an existing table
    # that already has the payload's schema (a tube's first put adds the payload
    # column, once), after a warm-up of each code path.
    sq.create_tube("warm", "fifottl").put(payload(spark, 1000))
    payload(spark, 1000).write.format("delta").save(f"{root}/warm_plain")
    # Each a median of --repeat runs after a warm-up run, in alternating order, so
    # that neither pays alone for the first write of this shape (the JIT's warm-up).
    # Beside them, a put of one row against an append of one row: what every put
    # pays whatever its size (a streaming sink's micro-batches are many small puts).
    puts = sq.create_tube("puts", "fifottl")
    puts.put(payload(spark, 1))
    payload(spark, 1).write.format("delta").save(f"{root}/plain_append")
    one = payload(spark, 1).localCheckpoint(eager=True)
    # A limfifottl tube's puts count its live tasks and commit in turn (a Delta
    # transaction id): what that costs, against the same puts into a fifottl tube.
    capped = sq.create_tube("capped", "limfifottl", capacity=10**15)
    capped.put(payload(spark, 1))
    put_times: dict[str, list[float]] = {
        "put": [], "append": [], "put_1": [], "append_1": [], "capped_put": [],
        "capped_put_1": []}
    for i in range(repeat + 1):
        runs = [("put", lambda: puts.put(rows)),
                ("append", lambda: rows.write.format("delta").mode("append")
                 .save(f"{root}/plain_append")),
                ("put_1", lambda: puts.put(one)),
                ("append_1", lambda: one.write.format("delta").mode("append")
                 .save(f"{root}/plain_append")),
                ("capped_put", lambda: capped.put(rows)),
                ("capped_put_1", lambda: capped.put(one))]
        for key, run in runs if i % 2 else reversed(runs):
            took = timed(run)
            if i:  # the first round is the warm-up
                put_times[key].append(took)
    for key, times in put_times.items():
        figures[f"{key}_s"] = statistics.median(times)
    figures["put_ratio"] = figures["put_s"] / figures["append_s"]
    figures["put_1_ratio"] = figures["put_1_s"] / figures["append_1_s"]
    figures["capped_put_ratio"] = figures["capped_put_s"] / figures["put_s"]
    figures["capped_put_1_ratio"] = figures["capped_put_1_s"] / figures["put_1_s"]


def take_tubes(sq: sparkqueue.Queue, rows: DataFrame,
               figures: Figures) -> tuple[sparkqueue.Tube, sparkqueue.Tube]:
    """The take section's tubes of ``rows``: one with the change feed, whose first take
    (the ingest) is timed apart, and one without."""
    tube = sq.create_tube("bench", "fifottl")  # the take section's 1,000,000 tasks
    tube.put(rows)

    # the first take ingests (the task it leases, the puts telling which): report it
    # apart, then move the rest into the tasks table, as the takes below find them
    figures["first_take_with_ingest_s"] = timed(lambda: tube.take(1))
    tube.release_all()
    ingest_all(tube)
    # the same tasks in a tube that keeps a change feed from creation (change_feed=True)
    feed = ingested(sq, "bench_feed", "fifottl", rows, change_feed=True)
    return tube, feed


def bench_take(spark: SparkSession, root: str, n_rows: int, takes: list[int], repeat: int,
               tubes: tuple[sparkqueue.Tube, sparkqueue.Tube], figures: Figures) -> None:
    """take(n) for each of ``takes`` against the hand-written MERGE, on both tubes."""
    tube, feed = tubes
    plain_table(spark, f"{root}/plain_tasks", n_rows)
    for n in takes:
        say(f"take({n}) against the hand-written MERGE")
        # time only the take: a release after each run keeps the table the same
        take_times, feed_times, merge_times = [], [], []
        for i in range(repeat + 1):
            t = timed(partial(tube.take, n))
            tube.release_all()
            f = timed(partial(feed.take, n))
            feed.release_all()
            m = timed(partial(plain_take, spark, f"{root}/plain_tasks", n))
            release_all_plain(spark, f"{root}/plain_tasks")
            if i:  # the first round is the warm-up
                take_times.append(t)
                feed_times.append(f)
                merge_times.append(m)
        figures[f"take_{n}_s"] = statistics.median(take_times)
        figures[f"take_{n}_feed_s"] = statistics.median(feed_times)
        figures[f"merge_{n}_s"] = statistics.median(merge_times)
        figures[f"take_{n}_ratio"] = figures[f"take_{n}_s"] / figures[f"merge_{n}_s"]
        figures[f"take_{n}_feed_ratio"] = (
            figures[f"take_{n}_feed_s"] / figures[f"merge_{n}_s"])


def bench_drain(spark: SparkSession, sq: sparkqueue.Queue, root: str, rows: DataFrame,
                n_rows: int, batch: int, figures: Figures) -> None:
    """Drains by take + ack and by a Consumer against hand-written MERGE drains."""
    # take + ack by hand, then a Consumer (each batch's acks ride with the next take),
    # then the same batches drained by hand-written MERGEs on plain Delta tables
    # (one MERGE per batch, as the Consumer), without and with the change feed; the
    # Consumer also on a tube that keeps a change feed (change_feed=True)
    for key in ("drain", "consumer_drain", "consumer_drain_feed", "plain_drain",
                "plain_drain_cdf"):
        say(f"{key} of {n_rows} tasks in batches of {batch}")
        if key.startswith("plain"):
            path = f"{root}/{key}"
            plain_table(spark, path, n_rows, change_feed=key.endswith("_cdf"))
            start = time.perf_counter()
            done = plain_drain(spark, path, batch)
        else:
            tube = ingested(sq, key, "fifottl", rows,
                            change_feed=key.endswith("_feed"))
            start = time.perf_counter()
            done = (drain_all if key == "drain" else consume_all)(tube, batch)
        figures[f"{key}_tasks"] = done
        figures[f"{key}_s"] = time.perf_counter() - start
        figures[f"{key}_tasks_per_s"] = done / figures[f"{key}_s"]
    for key in ("plain_drain", "plain_drain_cdf"):
        figures[f"consumer_drain_vs_{key}"] = figures["consumer_drain_s"] / figures[f"{key}_s"]
    figures["consumer_drain_feed_vs_plain_drain_cdf"] = (
        figures["consumer_drain_feed_s"] / figures["plain_drain_cdf_s"])
