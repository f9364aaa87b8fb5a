"""The benchmark's engines section: the portable engine beside the accelerated one.

In one run, on tubes of --rows tasks (fifottl, ingested first):

- take(1,000): a median of --repeat runs after a warm-up run, each followed by
  ``release_all``; take(1) and the ack of what it took, as many times, beside
  its baseline: a plain Delta table's UPDATE of one row by id and DELETE of it
  (:func:`plain_update_delete`), as many times;
- a drain of every task by ``take`` and ``ack`` of the taken DataFrame in batches
  of --drain-batch (the README's loop), on a tube whose puts are not ingested
  yet: ingest included;
- a drain of every task by a ``Consumer`` in batches of --drain-batch, in
  tasks per second, after a warm-up drain of --drain-warmup tasks on a tube
  of their own (the same for every engine): what a session that has run a
  while drains, where a new worker's drain, JVM start and warm-up included,
  is the e2e section's;

for the accelerated engine and the portable one on the benchmark's classic
session, and for the portable one as a Spark Connect client: a local Spark
Connect server with Delta (:class:`sparkqueue.server.ConnectServer`) and a
client process of its own (pyspark runs one kind of session per process),
which runs this file with ``SPARK_REMOTE`` set. Ratios are each engine's time
over the accelerated engine's.

    python -m bench.engines --rows 1000000 --json out.json   # as a client: SPARK_REMOTE=...
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import sparkqueue
from bench import REPO
from sparkqueue.engine.ingest import ingest
from sparkqueue.server import ConnectServer
from sparkqueue.store.schema import TASK_FILE_ROWS

ENGINES = ("accelerated", "portable")


def payload(spark: SparkSession, n: int) -> DataFrame:
    """The benchmark's rows (as bench/__main__.py's)."""
    return spark.range(n).select(
        F.col("id").alias("n"),
        F.concat(F.lit("https://example.com/item/"), F.col("id").cast("string")).alias("url"),
    )


def ingested(sq: sparkqueue.Queue, name: str, type_name: str, rows: DataFrame,
             **options: Any) -> sparkqueue.Tube:
    """A new tube holding ``rows`` as ready tasks, already ingested, so that what is
    timed next does not include the ingest."""
    tube = sq.create_tube(name, type_name, **options)
    if tube.driver.uses_utube:
        tube.put(rows, utube=F.col("q"))
    else:
        tube.put(rows)
    ingest_all(tube)
    return tube


def ingest_all(tube: sparkqueue.Tube) -> None:
    """Move every task put to ``tube`` into its tasks table (each shard's): a take
    of new puts may ingest only the tasks it leases."""
    for part in tube.parts:
        ingest(part.context)


def say(what: str) -> None:
    """A progress line on stderr, with the time."""
    print(f"[{time.strftime('%H:%M:%S')}] {what}", file=sys.stderr, flush=True)


def timed(fn: Callable[[], Any]) -> float:
    """Seconds ``fn()`` took."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def consume_all(tube: sparkqueue.Tube, n: int) -> int:
    """What a worker runs: a Consumer (batches of n, each batch's acks committed with
    the next take) until a take comes back empty; the number of tasks done."""
    return sparkqueue.Consumer(tube, lambda batch: None, batch_size=n, take_timeout=0,
                               idle_timeout=0).run().done


def take_ack_all(tube: sparkqueue.Tube, n: int) -> int:
    """The README's loop: ``take(n)``, then ``ack`` of the DataFrame taken, until a take
    comes back empty; the number of tasks done."""
    done = 0
    while True:
        got = tube.take(n)
        count = got.count()
        if not count:
            return done
        tube.ack(got)
        done += count


def medians(repeat: int, fn: Callable[[], Any], after: Callable[[], Any] | None = None,
            ) -> float:
    """The median seconds of ``repeat`` runs of ``fn`` after a warm-up run; ``after``
    runs after each, untimed."""
    times = []
    for i in range(repeat + 1):
        took = timed(fn)
        if after is not None:
            after()
        if i:  # the first run is the warm-up
            times.append(took)
    return statistics.median(times)


def plain_update_delete(spark: SparkSession, path: str, rows: DataFrame,
                        repeat: int) -> float:
    """The baseline of take(1) + ack(1): a plain Delta table of ``rows`` (their ``n`` as
    the id) written at ``path``, then the median seconds of one SQL UPDATE of one
    row by its id and one DELETE of it, each a Delta commit: what a take and an
    ack written as the plainest public SQL cost, without choosing the row. The
    table's files hold as many rows as a tube's tasks table's do."""
    (rows.select(F.col("n").alias("task_id"), "url", F.lit("ready").alias("status"),
                 F.lit(None).cast("string").alias("owner"))
     .write.format("delta").option("maxRecordsPerFile", TASK_FILE_ROWS).save(path))
    n = rows.count()
    ids = iter(range(7, 1 << 62, 1009))

    def update_delete() -> None:
        i = next(ids) % n
        spark.sql(f"UPDATE delta.`{path}` SET status = 'taken', owner = 'bench' "
                  f"WHERE task_id = {i} AND status = 'ready'").collect()
        spark.sql(f"DELETE FROM delta.`{path}` WHERE task_id = {i} AND owner = 'bench'").collect()
    return medians(repeat, update_delete)


def bench_engine(sq: sparkqueue.Queue, rows: DataFrame, prefix: str, batch: int,
                 repeat: int, warmup: int) -> dict[str, float]:
    """take(1000), take(1) + ack(1), a drain by take + ack and a Consumer drain on ``sq``'s
    engine; figures named ``prefix``... ``warmup``: tasks drained on a tube of
    their own before the timed drains."""
    figures: dict[str, float] = {}
    tube = ingested(sq, f"{prefix}take", "fifottl", rows)
    figures[f"{prefix}take_1000_s"] = medians(repeat, lambda: tube.take(1000), tube.release_all)
    figures[f"{prefix}take_ack_1_s"] = medians(repeat, lambda: tube.ack(tube.take(1)))
    figures[f"{prefix}plain_update_delete_1_s"] = plain_update_delete(
        sq.spark, f"{sq.root}/{prefix}plain", rows, repeat)
    figures[f"{prefix}take_ack_1_vs_plain_ratio"] = (figures[f"{prefix}take_ack_1_s"]
                                                     / figures[f"{prefix}plain_update_delete_1_s"])
    if warmup:
        consume_all(ingested(sq, f"{prefix}warmup", "fifottl", rows.limit(warmup)), batch)
    looped = sq.create_tube(f"{prefix}loop", "fifottl")
    looped.put(rows)
    start = time.perf_counter()
    done = take_ack_all(looped, batch)
    figures[f"{prefix}loop_drain_s"] = time.perf_counter() - start
    figures[f"{prefix}loop_drain_tasks_per_s"] = done / figures[f"{prefix}loop_drain_s"]
    drained = ingested(sq, f"{prefix}drain", "fifottl", rows)
    start = time.perf_counter()
    done = consume_all(drained, batch)
    figures[f"{prefix}drain_s"] = time.perf_counter() - start
    figures[f"{prefix}drain_tasks"] = done
    figures[f"{prefix}drain_tasks_per_s"] = done / figures[f"{prefix}drain_s"]
    return figures


def bench_engines(spark: SparkSession, root: str, rows: DataFrame, batch: int, repeat: int,
                  warmup: int = 2 * 100_000, connect: bool = True) -> dict[str, float]:
    """Both engines on ``spark`` (classic), then the portable one over Spark Connect."""
    figures: dict[str, float] = {"drain_warmup_tasks": warmup}
    for engine in ENGINES:
        sq = sparkqueue.connect(spark, f"{root}/{engine}", owner="bench", engine=engine)
        figures.update(bench_engine(sq, rows, f"{engine}_", batch, repeat, warmup))
    if connect:
        figures.update(over_connect(root, rows.count(), batch, repeat, warmup))
    for name in ("portable", "connect"):
        for figure in ("take_1000", "take_ack_1", "loop_drain", "drain"):
            if f"{name}_{figure}_s" in figures:
                figures[f"{name}_{figure}_ratio"] = (figures[f"{name}_{figure}_s"]
                                                     / figures[f"accelerated_{figure}_s"])
    return figures


#: The portable engine's targets as a Spark Connect client: (figure, bound, what).
#: A ratio is its time over the accelerated engine's in the same run; a drain at
#: 0.85x the accelerated one's speed (the target set against PGMQ's) is a ratio of
#: at most 1 / 0.85.
TARGETS = (
    ("connect_loop_drain_ratio", 1 / 0.85, "a drain by take + ack at 0.85x the accelerated "
     "engine's speed or more"),
    ("connect_drain_ratio", 1 / 0.85, "a Consumer's drain at 0.85x the accelerated engine's "
     "speed or more"),
    ("connect_take_1000_ratio", 2.0, "take(1,000) at most 2x the accelerated engine's"),
    ("connect_take_ack_1_s", 1.0, "take(1) + ack(1) at most 1.0 s"),
)


def over_connect(root: str, n: int, batch: int, repeat: int,
                 warmup: int) -> dict[str, float]:
    """:func:`bench_engine` in a Spark Connect client process of a local server."""
    out = Path(tempfile.mkdtemp(prefix="sparkqueue-bench-connect-")) / "figures.json"
    server = ConnectServer(conf={"spark.driver.memory": "6g"}, log=out.parent / "server.log")
    with server:
        subprocess.run(
            [sys.executable, "-m", "bench.engines", "--rows", str(n), "--drain-batch", str(batch),
             "--repeat", str(repeat), "--drain-warmup", str(warmup),
             "--root", f"{root}/connect", "--json", str(out)],
            env={**os.environ, "SPARK_REMOTE": server.url}, cwd=REPO, check=True)
    figures: dict[str, float] = json.loads(out.read_text())
    return figures


def main(argv: list[str] | None = None) -> int:
    """A Spark Connect client's run (``SPARK_REMOTE`` set): figures named ``connect_``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--drain-batch", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--drain-warmup", type=int, default=2 * 100_000)
    parser.add_argument("--root", required=True)
    parser.add_argument("--json", required=True)
    args = parser.parse_args(argv)
    spark = sparkqueue.session(app_name="sparkqueue-benchmark-connect")
    sq = sparkqueue.connect(spark, args.root, owner="bench")
    rows = payload(spark, args.rows).localCheckpoint(eager=True)
    figures: dict[str, Any] = {"connect_engine": sq.engine}
    figures.update(bench_engine(sq, rows, "connect_", args.drain_batch, args.repeat,
                                args.drain_warmup))
    Path(args.json).write_text(json.dumps({k: v for k, v in figures.items()
                                           if not isinstance(v, str)}))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
