"""sparkqueue benchmark: each figure against a plain-Delta baseline run in the same process.

Prints, in one run:

- put of N rows (default 1,000,000) against a plain Delta append of the same rows
  (both into an existing table: a tube's first put also adds its payload column;
  each a median of --repeat runs after a warm-up run, alternating), and a put of
  one row against an append of one row (what every put pays, whatever its size);
  the same two puts into a limfifottl tube (a capacity: its puts count the live
  tasks and commit one after another) against the fifottl puts;
- take(n) for n = 1, 1,000, 100,000 on an N-task tube, against a hand-written
  MERGE that flips the n lowest-id ready rows of a plain Delta table holding
  the same rows (each a median of --repeat runs, after a warm-up run), and the
  same takes on a tube created with ``change_feed=True`` (a change feed kept
  from creation; a tube keeps none until ``changes()`` is first called);
- a drain of N tasks, take + ack in batches of 100,000, in tasks per second,
  and the same drain by a ``Consumer`` (each batch's acks committed together
  with the next take: one commit per batch), against hand-written drains of
  plain Delta tables holding the same rows: one MERGE per batch deleting the
  previous batch and flipping the next, with Delta's change data feed off and
  on (what ``Tube.changes`` reads); the Consumer drain also on a tube created
  with ``change_feed=True``, against the drain with the feed on.

These three sections are in bench/verbs.py. With --scale it adds
take(1,000) on a 10,000-task tube against the same on a --big-task tube
(10,000,000 by default; both written straight into the tasks table, as
put + ingest would leave them, see ``tasks_table``).

The engines section (bench/engines.py) times take(1,000), take(1) + ack(1),
a drain by take + ack (ingest included) and a Consumer drain on the
accelerated engine, the portable one, and the portable one as a Spark
Connect client of a local server, with their ratios, and reports the
portable engine's targets (``TARGETS``); each engine's figures follow a
warm-up drain of --engines-warmup tasks. It also times, on each engine, a
put of the rows then the first take(1) less the next (put to takeable)
against a plain Delta write of them, and take(1,000) with window 1 over
1,000 sub-queues; and, as a Spark Connect client, take(1,000), take(1) +
ack(1) and a Consumer drain on a catalog root against a path root.

The e2e section (bench/e2e.py) measures what a user waits for: drains in
new processes from the first put call to the last ack (cold, then warm), put to
takeable against a plain Delta append, and take(1) + ack(1) round trips against
a one-row MERGE plus a one-row UPDATE.

The lines section (bench/lines.py) runs a new worker's take + ack drain
of --rows tasks in batches of --drain-batch on every supported Spark line, each
in a venv of its own, against a plain Delta append of the same rows on that line.

The shards section (bench/shards.py) runs four consumers, each a Spark
application of its own, on a four-shard tube against one consumer, and
against four on a tube of one shard (--shard-single-rows tasks, as it drains
far more slowly): tasks per second and conflicts per take; four against one
again with each consumer's JVM compiling with C1 alone; the same for
sub-queues taken with window 1; and one consumer held to one core against two
held to a core each (--shard-cores-rows tasks): how the drain grows with cores.

The s3 section (bench/s3.py) runs take(1,000) and a Consumer drain on a
local S3-compatible server (versitygw, started for it) beside a local folder,
in one application whose session sparkqueue built for S3, with the S3
requests per take (S3A's statistics) and the S3-over-local ratios.

The soak section (bench/soak.py) runs one tube through --soak-rounds small
rounds of put + take + ack with the sweeper on its schedule (as ``make soak``'s
per round: a sweep every fortieth of the rounds, compaction every twentieth,
VACUUM every quarter), on each engine, on a local folder and on S3: the
rounds of the last tenth against the first, the files the tables keep, the
log's length and its checkpoints.

The sweep section times one sweeper pass over a 100,000-task and a
10,000,000-task tube with 1% of the tasks due in each (--sweep-sizes).

The utube section runs the Tarantool queue README's two utube benchmarks:

- 30,000 sub-queues of one task each: put all (against a plain append of the
  same rows), then take + ack all; each a median of --repeat rounds on new
  tubes after a warm-up round;
- busy sub-queues: 10 sub-queues of 1,000, 10,000 and 150,000 tasks, drained
  in order with window 10,000 (against a fifottl drain of the same rows in
  the same batches, and by a Consumer, also on a tube with ``change_feed=True``),
  and with window 1: the cost of one take while nine of
  the ten sub-queues are busy, at each backlog, and a few take + ack rounds.

    python -m bench [--rows 1000000] [--repeat 3] [--scale] [--json out.json]
    python -m bench --sections utube  # of put,take,drain,utube,engines,e2e,lines,
                                               #    shards,s3,sweep,soak
    PYTHONPATH=. spark-submit $(sparkqueue submit-args) bench/__main__.py

Timings are wall-clock seconds of whole calls (time.perf_counter) on whatever
machine runs it; quote medians and ratios, and the machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import shutil
import statistics
import sys
import tempfile
import time
from functools import partial
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import sparkqueue
from bench import soak
from bench.e2e import Sizes, bench_e2e
from bench.engines import bench_engines, consume_all, ingested, payload, say, timed
from bench.lines import bench_lines
from bench.report import core_speed, write_report
from bench.s3 import bench_s3
from bench.shards import bench_shards
from bench.verbs import bench_drain, bench_put, bench_take, drain_all, take_tubes
from sparkqueue import s3gateway
from sparkqueue.store import TASK_FILE_ROWS

#: the benchmark's sections, in the order they run
SECTIONS = ("put", "take", "drain", "utube", "engines", "e2e", "lines", "shards", "s3", "sweep",
            "soak")


def sub_queue_rows(spark: SparkSession, queues: int, each: int) -> DataFrame:
    """``queues`` sub-queues (column ``q``) of ``each`` tasks."""
    return spark.range(queues * each).select(
        F.col("id").alias("n"),
        F.concat(F.lit("q"), (F.col("id") % queues).cast("string")).alias("q"),
    ).localCheckpoint(eager=True)


def bench_utube(spark: SparkSession, sq: sparkqueue.Queue, root: str,
                figures: dict[str, Any], sizes: list[int], rounds: int, repeat: int) -> None:
    """The Tarantool queue README's utube benchmarks, with same-process baselines."""
    say("utube: 30,000 one-task sub-queues")
    one_each = sub_queue_rows(spark, 30_000, 1)
    one = sub_queue_rows(spark, 1, 1)
    # Each figure a median of --repeat rounds after a warm-up round, each round on a new
    # tube and a new plain table that have had two puts (appends) of one row: a tube's
    # first two puts pay one-time Delta costs (its payload schema; then a checksum
    # that lists every file, rebuilt from the table's state in two Spark jobs).
    # The put and the append alternate in order.
    times: dict[str, list[float]] = {"put": [], "append": [], "take_ack": []}
    for i in range(repeat + 1):
        u = sq.create_tube(f"u30k_{i}", "utube")
        plain = f"{root}/u30k_plain_{i}"
        for _ in range(2):
            u.put(one, utube=F.col("q"))
            one.write.format("delta").mode("append").save(plain)
        drain_all(u, 10)
        runs = [("put", lambda u=u: u.put(one_each, utube=F.col("q"))),
                ("append", lambda plain=plain: one_each.write.format("delta").mode("append")
                 .save(plain))]
        took = {key: timed(run) for key, run in (runs if i % 2 else reversed(runs))}
        took["take_ack"] = timed(partial(drain_all, u, 30_000))
        if i:  # the first round is the warm-up
            for key, value in took.items():
                times[key].append(value)
    for key, values in times.items():
        figures[f"utube_30k_{key}_s"] = statistics.median(values)
    figures["utube_30k_total_s"] = figures["utube_30k_put_s"] + figures["utube_30k_take_ack_s"]

    for each in sizes:
        rows = sub_queue_rows(spark, 10, each)
        total = 10 * each
        say(f"utube: 10 busy sub-queues of {each}, window 1")
        w1 = sq.create_tube(f"w1_{each}", "utube")
        w1.put(rows, utube=F.col("q"))
        heads = w1.take(10)  # ingest, and every sub-queue busy
        first_q = heads.orderBy("task_id").first()
        assert first_q is not None
        w1.ack(heads.where(F.col("utube") == first_q["utube"]))
        # one sub-queue free, nine busy with each-1 tasks behind their heads
        figures[f"utube_busy_{each}_take_w1_s"] = timed(partial(w1.take, 10))
        w1.release_all()
        start = time.perf_counter()
        done = 0
        for _ in range(rounds):
            batch = w1.take(10)
            done += batch.count()
            w1.ack(batch)
        figures[f"utube_busy_{each}_w1_rounds_tasks_per_s"] = done / (time.perf_counter() - start)

        say(f"utube: 10 sub-queues of {each}, drained with window 10,000")
        w = ingested(sq, f"w10k_{each}", "utube", rows, window=10_000)
        figures[f"utube_busy_{each}_drain_w10000_s"] = timed(partial(drain_all, w, 100_000))
        f = ingested(sq, f"fifo_{each}", "fifottl", rows)
        figures[f"fifo_{each}_drain_s"] = timed(partial(drain_all, f, 100_000))
        c = ingested(sq, f"c10k_{each}", "utube", rows, window=10_000)
        figures[f"utube_busy_{each}_consumer_w10000_s"] = timed(
            partial(consume_all, c, 100_000))
        cf = ingested(sq, f"cf10k_{each}", "utube", rows, window=10_000, change_feed=True)
        figures[f"utube_busy_{each}_consumer_w10000_feed_s"] = timed(
            partial(consume_all, cf, 100_000))
        figures[f"utube_busy_{each}_drain_ratio"] = (
            figures[f"utube_busy_{each}_drain_w10000_s"] / figures[f"fifo_{each}_drain_s"])
        figures[f"utube_busy_{each}_drain_tasks_per_s"] = (
            total / figures[f"utube_busy_{each}_drain_w10000_s"])
    first, last = sizes[0], sizes[-1]
    figures["utube_busy_take_w1_backlog_ratio"] = (
        figures[f"utube_busy_{last}_take_w1_s"] / figures[f"utube_busy_{first}_take_w1_s"])


def tasks_table(spark: SparkSession, sq: sparkqueue.Queue, name: str, size: int,
                due: int = 0) -> sparkqueue.Tube:
    """A fifottl tube of ``size`` ready tasks written straight into its tasks table.

    What put + ingest would leave (ids in order, files of TASK_FILE_ROWS rows),
    built in one write so that 10,000,000-task tubes are quick to make. The
    ``due`` oldest tasks are due now: half past their ttl, half taken with an
    ended lease.
    """
    tube = sq.create_tube(name, "fifottl")
    now = time.time()
    inf = float("inf")
    expired = F.col("id") < due // 2
    leased = (F.col("id") >= due // 2) & (F.col("id") < due)
    ttl_end = F.when(expired, F.lit(now - 1)).otherwise(F.lit(inf))
    lease_end = F.when(leased, F.lit(now - 1)).otherwise(F.lit(0.0))
    rows = spark.range(size).select(
        F.col("id").alias("task_id"),
        F.when(leased, "taken").otherwise("ready").alias("status"),
        F.lit(0).cast("long").alias("pri"), F.col("id").alias("order_key"),
        F.lit(None).cast("string").alias("utube"), F.lit(now - 1000).alias("created"),
        (ttl_end - (now - 1000)).alias("ttl"), F.lit(inf).alias("ttr"),
        F.lit(0.0).alias("delay_end"), ttl_end.alias("ttl_end"), lease_end.alias("lease_end"),
        F.when(leased, lease_end).otherwise(ttl_end).alias("next_event"),
        F.when(leased, "gone").alias("owner"), F.when(leased, "x").alias("lease_token"),
        F.when(leased, 1).otherwise(0).cast("long").alias("taken_count"),
        F.lit(0).cast("long").alias("buried_count"), F.lit(0).cast("long").alias("inbox_version"),
        F.struct(F.col("id").alias("n"), F.concat(F.lit("https://example.com/item/"),
                                                   F.col("id").cast("string")).alias("url"))
        .alias("data"))
    (rows.write.format("delta").mode("append").option("mergeSchema", "true")
     .option("maxRecordsPerFile", TASK_FILE_ROWS).save(tube.context.layout.tasks(name)))
    return tube


def bench_sweep(spark: SparkSession, root: str, figures: dict[str, Any],
                sizes: list[int]) -> None:
    """One sweeper pass over tubes of each size with 1% of the tasks due (half ttl,
    half ended leases); maintenance off, so the pass is expiry, purge and snapshot."""
    config = dataclasses.replace(sparkqueue.load_config(), compact_interval=float("inf"),
                                 vacuum_interval=float("inf"))
    sq = sparkqueue.connect(spark, f"{root}/sweep", owner="bench", config=config)
    warm = tasks_table(spark, sq, "warm", 10_000, due=100)
    sq.sweep(warm.name)
    for size in sizes:
        say(f"sweep: {size} tasks, 1% due")
        tube = tasks_table(spark, sq, f"s{size}", size, due=size // 100)
        marks: list[tuple[str, float]] = []
        start = time.perf_counter()
        def mark(line: str, marks: list[tuple[str, float]] = marks) -> None:
            marks.append((line, time.perf_counter()))
        counts = sq.sweep(tube.name, progress=mark)
        figures[f"sweep_{size}_s"] = time.perf_counter() - start
        figures[f"sweep_{size}_expire_s"] = next(
            t for line, t in marks if "expired" in line) - start
        figures[f"sweep_{size}_written_down"] = counts["ttl"] + counts["ttr"]
    small, big = sizes[0], sizes[-1]
    figures["sweep_size_ratio"] = figures[f"sweep_{big}_s"] / figures[f"sweep_{small}_s"]
    figures["sweep_expire_size_ratio"] = (
        figures[f"sweep_{big}_expire_s"] / figures[f"sweep_{small}_expire_s"])


def bench_scale(spark: SparkSession, sq: sparkqueue.Queue, big: int, repeat: int,
                figures: dict[str, Any]) -> None:
    """take(1000) on a 10,000-task tube against the same on a ``big``-task tube."""
    for size in (10_000, big):
        say(f"take(1000) on a tube of {size} tasks")
        scaled = tasks_table(spark, sq, f"scale{size}", size)
        times = []
        for _ in range(repeat + 1):  # the first run is the warm-up
            times.append(timed(partial(scaled.take, 1000)))
            scaled.release_all()
        figures[f"take_1000_on_{size}_s"] = statistics.median(times[1:])
    figures["take_1000_scale_ratio"] = (
        figures[f"take_1000_on_{big}_s"] / figures["take_1000_on_10000_s"])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; unknown sections are refused."""
    parser = argparse.ArgumentParser(description="sparkqueue against plain Delta")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--takes", default="1,1000,100000", help="take sizes, comma-separated")
    parser.add_argument("--drain-batch", type=int, default=100_000)
    parser.add_argument("--scale", action="store_true", help="also take(1000) on a --big tube")
    parser.add_argument("--big", type=int, default=10_000_000)
    parser.add_argument("--sections", default=",".join(SECTIONS),
                        help=f"which to run, comma-separated: {','.join(SECTIONS)}")
    parser.add_argument("--engines-warmup", type=int, default=200_000,
                        help="tasks each engine of the engines section drains before "
                             "anything of it is timed")
    parser.add_argument("--shard-rows", type=int, default=200_000,
                        help="tasks of the shards section's drains")
    parser.add_argument("--shard-single-rows", type=int, default=20_000,
                        help="tasks of the shards section's drain of a tube of one shard "
                             "by four consumers")
    parser.add_argument("--shard-batch", type=int, default=1000)
    parser.add_argument("--utube-each", type=int, default=20,
                        help="tasks per sub-queue in the shards section's utube drains")
    parser.add_argument("--shard-warmup", type=int, default=10_000,
                        help="tasks each consumer of the shards section drains first")
    parser.add_argument("--shard-cores-rows", type=int, default=100_000,
                        help="tasks of the shards section's drains by consumers held to "
                             "a core each (0: none)")
    parser.add_argument("--e2e-big-rows", type=int, default=5_000_000,
                        help="tasks of the end-to-end section's big drains (0: none)")
    parser.add_argument("--e2e-big-batch", type=int, default=1_000_000)
    parser.add_argument("--round-trip-rows", type=int, default=100_000,
                        help="tasks in the tube of the take(1) + ack(1) round trips")
    parser.add_argument("--s3-rows", type=int, default=100_000,
                        help="tasks of the s3 section's tubes")
    parser.add_argument("--s3-batch", type=int, default=10_000,
                        help="batch of the s3 section's drains")
    parser.add_argument("--sweep-sizes", default="100000,10000000",
                        help="tube sizes of the sweep benchmark (1%% of each due)")
    parser.add_argument("--utube-sizes", default="1000,10000,150000",
                        help="tasks per sub-queue in the busy sub-queue benchmark")
    parser.add_argument("--utube-rounds", type=int, default=3,
                        help="take + ack rounds timed with window 1")
    parser.add_argument("--soak-rounds", type=int, default=300,
                        help="rounds of the soak on each engine and root (make soak: more)")
    parser.add_argument("--root", default=None, help="work directory (default: a temp dir)")
    parser.add_argument("--json", default=None, help="also write the figures here")
    parser.add_argument("--write", default=None,
                        help="also write the run as a Markdown report here (BENCHMARKS.md)")
    parser.add_argument("--driver-memory", default="6g",
                        help="for a local run started with plain python (spark-submit: "
                             "use its --driver-memory)")
    args = parser.parse_args(argv)
    unknown = set(args.sections.split(",")) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown section(s): {', '.join(sorted(unknown))}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if {"s3", "soak"} & set(args.sections.split(",")):
        s3gateway.binary()  # missing: say so now, not after the sections before it

    root = args.root or tempfile.mkdtemp(prefix="sparkqueue-bench-")
    spark = sparkqueue.session(app_name="sparkqueue-benchmark",
                               conf={"spark.driver.memory": args.driver_memory})
    sq = sparkqueue.connect(spark, f"{root}/queues", owner="bench")
    figures: dict[str, Any] = {
        "machine": f"{platform.node()} {platform.machine()} {platform.system()}",
        "cores": spark.sparkContext.defaultParallelism, "rows": args.rows,
        "date": time.strftime("%Y-%m-%d"), "sparkqueue": sparkqueue.__version__,
        "core_speed_start_s": core_speed(),
    }
    sections = set(args.sections.split(","))
    rows = payload(spark, args.rows).localCheckpoint(eager=True)

    if sections & {"put", "take"}:
        bench_put(spark, sq, root, rows, args.rows, args.repeat, figures)
        tubes = take_tubes(sq, rows, figures)
    if "take" in sections:
        bench_take(spark, root, args.rows, [int(x) for x in args.takes.split(",")],
                   args.repeat, tubes, figures)
    if "drain" in sections:
        bench_drain(spark, sq, root, rows, args.rows, args.drain_batch, figures)

    if "utube" in sections:
        bench_utube(spark, sq, root, figures,
                    [int(x) for x in args.utube_sizes.split(",")], args.utube_rounds,
                    args.repeat)

    if "engines" in sections:
        say(f"the portable engine beside the accelerated one, {args.rows} tasks")
        figures.update(bench_engines(spark, f"{root}/engines", rows, args.drain_batch,
                                     args.repeat, args.engines_warmup))

    if "e2e" in sections:
        say(f"end to end: drains of {args.rows} tasks in new processes, round trips")
        figures.update(bench_e2e(spark, sq, f"{root}/e2e", Sizes(
            args.rows, args.drain_batch, args.e2e_big_rows, args.e2e_big_batch,
            args.round_trip_rows, args.repeat, args.driver_memory), say))

    if "lines" in sections:
        say(f"every Spark line: a new worker's take + ack of {args.rows} tasks")
        figures.update(bench_lines(f"{root}/lines", args.rows, args.drain_batch,
                                   args.driver_memory, say))

    if "shards" in sections:
        say(f"shards: consumers in Spark applications of their own, {args.shard_rows} tasks")
        figures.update(bench_shards(spark, f"{root}/shards", args.shard_rows,
                                    args.shard_batch, args.utube_each, args.shard_warmup, say,
                                    args.shard_single_rows, args.shard_cores_rows))

    if "s3" in sections:
        say(f"s3: a local S3 server beside a local folder, {args.s3_rows} tasks")
        figures.update(bench_s3(f"{root}/s3", args.s3_rows, args.s3_batch, args.repeat,
                                min(args.s3_rows, 20_000)))

    if "sweep" in sections:
        bench_sweep(spark, root, figures, [int(x) for x in args.sweep_sizes.split(",")])

    if "soak" in sections:
        say(f"soak: {args.soak_rounds} rounds of put, take and ack of "
            f"{soak.DEFAULTS['batch']} on each engine, a local folder and S3")
        figures.update(soak.run(spark, f"{root}/soak", list(soak.WHERE),
                                **soak.scaled(args.soak_rounds)))

    if args.scale:
        bench_scale(spark, sq, args.big, args.repeat, figures)

    figures["core_speed_end_s"] = core_speed()
    width = max(len(k) for k in figures)
    print("\nsparkqueue benchmark")
    for key, value in figures.items():
        shown = f"{value:.3f}" if isinstance(value, float) else str(value)
        print(f"  {key:<{width}}  {shown}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(figures, out, indent=2)
    if args.write:
        write_report(args.write, figures, argv if argv is not None else sys.argv[1:])
    spark.stop()
    if args.root is None:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
