"""The benchmark's s3 section: tubes on S3 beside tubes on the local file system.

In one Spark application whose session sparkqueue built for an S3 root (S3A,
the conditional-put log store), on a local S3-compatible server
(:class:`sparkqueue.s3gateway.S3Gateway`, versitygw keeping objects as local
files) and on a local folder, each holding --rows tasks (fifottl, ingested
first), after a warm-up drain of --warmup tasks on each:

- take(1,000): a median of --repeat runs after a warm-up run, each followed
  by ``release_all``; with the S3 requests each take made (S3A's own
  statistics of the root's file system: LIST, HEAD, GET, PUT, DELETE and
  their kin), and the S3 log entries each listed;
- a drain of every task by a ``Consumer`` in batches of --drain-batch, in
  tasks per second, with the S3 requests per batch;
- on S3, take(1,000) by the portable engine too (what a Spark Connect client
  runs), with its requests;

and the S3 figures over the local ones as ratios. What it measures is the
cost of going through S3's protocol (requests, listing, conditional puts);
a local gateway has none of a real bucket's network latency, so a remote
bucket adds that per request: the requests per take say how much.

    python -m bench.s3 --rows 100000 --json out.json     # starts its own gateway
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

import sparkqueue
from bench import REPO, emit
from bench.engines import consume_all, ingested, payload
from sparkqueue.s3gateway import S3Gateway

#: S3A's counter of the requests it has sent to the store (Hadoop's ``Statistic`` name)
REQUESTS = "store_io_request"


def s3_requests(spark: SparkSession, root: str) -> int:
    """Requests the S3A file system of ``root`` has sent so far (its IOStatistics)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    path = jvm.org.apache.hadoop.fs.Path(root)
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    return int(fs.getIOStatistics().counters().get(REQUESTS) or 0)


def takes(tube: sparkqueue.Tube, repeat: int,
          requests: Callable[[], int]) -> tuple[list[float], list[int]]:
    """Seconds and requests of --repeat take(1000)s after a warm-up one, each
    followed by ``release_all``."""
    times, sent = [], []
    for i in range(repeat + 1):
        before = requests()
        took = time.perf_counter()
        tube.take(1000)
        took = time.perf_counter() - took
        after = requests()
        tube.release_all()
        if i:  # the first run is the warm-up
            times.append(took)
            sent.append(after - before)
    return times, sent


def bench_root(spark: SparkSession, sq: sparkqueue.Queue, prefix: str, rows: DataFrame,
               batch: int, repeat: int, s3_root: str | None) -> dict[str, float]:
    """take(1000) and a Consumer drain on ``sq``'s root; figures named ``prefix``...;
    with ``s3_root``, the S3 requests they made."""
    def requests() -> int:
        return 0 if s3_root is None else s3_requests(spark, s3_root)

    figures: dict[str, float] = {}
    tube = ingested(sq, f"{prefix}take", "fifottl", rows)
    times, sent = takes(tube, repeat, requests)
    figures[f"{prefix}take_1000_s"] = statistics.median(times)
    if s3_root is not None:
        figures[f"{prefix}take_1000_requests"] = statistics.median(sent)
        portable = sparkqueue.connect(sq.spark, sq.root, owner="bench", engine="portable")
        took_portable, sent_portable = takes(portable.tube(tube.name), repeat, requests)
        figures[f"{prefix}portable_take_1000_s"] = statistics.median(took_portable)
        figures[f"{prefix}portable_take_1000_requests"] = statistics.median(sent_portable)
    drained = ingested(sq, f"{prefix}drain", "fifottl", rows)
    before = requests()
    start = time.perf_counter()
    done = consume_all(drained, batch)
    figures[f"{prefix}drain_s"] = time.perf_counter() - start
    figures[f"{prefix}drain_tasks_per_s"] = done / figures[f"{prefix}drain_s"]
    if s3_root is not None:
        # a Consumer's takes: one per batch, and the empty one that ends it
        rounds = -(-done // batch) + 1
        figures[f"{prefix}drain_requests_per_take"] = (requests() - before) / rounds
    return figures


def bench_s3(root: str, n: int, batch: int, repeat: int, warmup: int) -> dict[str, float]:
    """:func:`bench_root` on a local gateway's bucket and on a local folder, in an
    application of its own (its session needs S3A from the start); with ratios."""
    work = Path(tempfile.mkdtemp(prefix="sparkqueue-bench-s3-"))
    out = work / "figures.json"
    with S3Gateway(work / "objects") as gateway:
        subprocess.run(
            [sys.executable, "-m", "bench.s3", "--rows", str(n), "--drain-batch", str(batch),
             "--repeat", str(repeat), "--warmup", str(warmup), "--local-root", f"{root}/local",
             "--s3-root", gateway.root("bench"), "--json", str(out)],
            env={**os.environ, **gateway.env}, cwd=REPO, check=True)
    figures: dict[str, float] = json.loads(out.read_text())
    figures["s3_take_1000_ratio"] = figures["s3_take_1000_s"] / figures["local_take_1000_s"]
    figures["s3_drain_ratio"] = figures["s3_drain_s"] / figures["local_drain_s"]
    return figures


def main(argv: list[str] | None = None) -> int:
    """The application's run: the local root, then the S3 one."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--drain-batch", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=20_000,
                        help="tasks drained on each root before anything is timed")
    parser.add_argument("--local-root", default=None, help="default: a temp dir")
    parser.add_argument("--s3-root", default=None,
                        help="default: a gateway started here (versitygw in the venv)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.s3_root is None:
        local = args.local_root or tempfile.mkdtemp(prefix="sparkqueue-bench-s3-")
        figures: dict[str, Any] = bench_s3(local, args.rows, args.drain_batch, args.repeat,
                                           args.warmup)
    else:
        spark = sparkqueue.session(app_name="sparkqueue-benchmark-s3", root=args.s3_root,
                                   conf={"spark.driver.memory": "6g"})
        local = args.local_root or tempfile.mkdtemp(prefix="sparkqueue-bench-s3-")
        figures = {"s3_rows": args.rows, "s3_drain_batch": args.drain_batch}
        rows = payload(spark, args.rows).localCheckpoint(eager=True)
        roots = {"local_": sparkqueue.connect(spark, local, owner="bench"),
                 "s3_": sparkqueue.connect(spark, args.s3_root, owner="bench")}
        for sq in roots.values():
            consume_all(ingested(sq, "warmup", "fifottl", rows.limit(args.warmup)),
                        args.drain_batch)
        for prefix, sq in roots.items():
            figures.update(bench_root(spark, sq, prefix, rows, args.drain_batch, args.repeat,
                                      args.s3_root if prefix == "s3_" else None))
        spark.stop()
    emit(figures, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
