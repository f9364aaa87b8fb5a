"""The benchmark's end-to-end section: what a user of a tube waits for.

In one run:

- drains in new processes: each a Python process of its own with a new local
  Spark (the session's start, the JIT's warm-up and the ingest all paid),
  timed from the first put call to the last ack: --rows tasks put in one put,
  then ``take(batch)`` + ``ack`` until a take comes back empty (``take_ack``),
  or a ``Consumer`` (``consumer``); then, in that same process, the same drain
  of a new tube (``warm``). Tasks per second, cold and warm, the process's
  session start apart, and the seconds the JVM's JIT compilers spent during
  each drain (``jit_s``, on any of their threads). The same for --big-rows
  tasks in batches of --big-batch (cold only).
- put to takeable: in the ``take_ack`` processes, the put plus the first take
  (which ingests the put, or the part of it that it leases) less the median
  of the later takes, against a plain
  Delta append of the same rows, cold (a process of its own that writes
  nothing else first) and warm (a median of --repeat appends after it).
- round trips, in the benchmark's own process: take(1) + ack(1) on a tube of
  --round-trip-rows tasks against a one-row MERGE plus a one-row UPDATE of a
  plain Delta table of as many rows, and ack(1) alone against the UPDATE
  (medians of --repeat rounds after a warm-up round).

    python -m bench.e2e --rows 1000000 --json out.json        # the section alone
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
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

import sparkqueue
from bench import REPO, emit
from bench.engines import consume_all, ingested, payload, timed

#: What a worker process runs (``--drain``): two drains, or plain appends alone.
DRAINS = ("take_ack", "consumer", "plain")


def drain(sq: sparkqueue.Queue, name: str, rows: DataFrame, batch: int,
          how: str) -> dict[str, float]:
    """Put ``rows`` into a new tube and drain it; timed from the put call to the last ack."""
    tube = sq.create_tube(name, "fifottl")
    jit = jit_seconds(rows.sparkSession)
    start = time.perf_counter()
    put_s = timed(lambda: tube.put(rows))
    takes: list[float] = []
    if how == "consumer":
        done = consume_all(tube, batch)
    else:
        done = 0
        while True:
            took = time.perf_counter()
            taken = tube.take(batch)
            takes.append(time.perf_counter() - took)
            got = taken.count()
            if not got:
                break
            tube.ack(taken)
            done += got
    total = time.perf_counter() - start
    figures: dict[str, float] = {"s": total, "tasks": done, "tasks_per_s": done / total,
                                 "put_s": put_s, "jit_s": jit_seconds(rows.sparkSession) - jit}
    if len(takes) >= 3:  # the first take ingests first; the last one found nothing
        normal = statistics.median(takes[1:-1])
        figures["first_take_s"] = takes[0]
        figures["take_s"] = normal
        figures["put_to_takeable_s"] = put_s + takes[0] - normal
    return figures


def jit_seconds(spark: SparkSession) -> float:
    """Seconds the driver JVM's JIT compilers have spent so far (all their threads):
    in a new process, on a machine of few cores, the warm-up that competes with
    the drain for them."""
    jvm = spark._jvm
    assert jvm is not None  # a worker's session is classic
    return float(jvm.java.lang.management.ManagementFactory.getCompilationMXBean()
                 .getTotalCompilationTime()) / 1000


def worker(args: argparse.Namespace) -> dict[str, float]:
    """One new process's drains (``args.drain``); figures named by drain and phase."""
    started = time.perf_counter()
    spark = sparkqueue.session(app_name=f"sparkqueue-benchmark-{args.drain}",
                               conf={"spark.driver.memory": args.driver_memory})
    figures = {"session_s": time.perf_counter() - started}
    rows = payload(spark, args.rows).localCheckpoint(eager=True)
    if args.drain == "plain":
        def write(to: str) -> float:
            return timed(lambda: rows.write.format("delta").save(f"{args.root}/{to}"))

        cold = write("plain_cold")
        warm = [write(f"plain_{i}") for i in range(args.repeat)]
        figures.update(cold_s=cold, warm_s=statistics.median(warm))
    else:
        sq = sparkqueue.connect(spark, f"{args.root}/queues", owner="bench")
        phases = ("cold", "warm") if args.warm else ("cold",)
        for phase in phases:
            done = drain(sq, phase, rows, args.drain_batch, args.drain)
            figures.update({f"{phase}_{k}": v for k, v in done.items()})
    spark.stop()
    return figures


def in_new_process(root: str, drain_kind: str, rows: int, batch: int, repeat: int,
                   warm: bool, memory: str, python: str = sys.executable) -> dict[str, float]:
    """:func:`worker` in a process of its own, of ``python`` (another venv's: another
    Spark line, whose Python workers run on it too); its figures."""
    out = Path(tempfile.mkdtemp(prefix="sparkqueue-bench-e2e-")) / "figures.json"
    subprocess.run(
        [python, "-m", "bench.e2e", "--drain", drain_kind, "--rows", str(rows),
         "--drain-batch", str(batch), "--repeat", str(repeat), "--root", root,
         "--driver-memory", memory, "--json", str(out), *(["--warm"] if warm else [])],
        env={**os.environ, "PYSPARK_PYTHON": python}, cwd=REPO, check=True)
    figures: dict[str, float] = json.loads(out.read_text())
    return figures


def round_trips(spark: SparkSession, sq: sparkqueue.Queue, root: str, n: int,
                repeat: int) -> dict[str, float]:
    """take(1) + ack(1) against a one-row MERGE + a one-row UPDATE; ack(1) against the
    UPDATE. Medians of ``repeat`` rounds after a warm-up round."""
    tube = ingested(sq, "round_trip", "fifottl", payload(spark, n))
    plain = f"{root}/round_trip_plain"
    payload(spark, n).selectExpr("n AS id", "'ready' AS status", "CAST(NULL AS STRING) AS owner",
                                 "url").write.format("delta").save(plain)
    def one_round(i: int) -> dict[str, float]:
        start = time.perf_counter()
        taken = tube.take(1)
        took = {"take": time.perf_counter() - start}
        took["ack"] = timed(lambda: tube.ack(taken))
        took["merge"] = timed(lambda: spark.sql(
            f"MERGE INTO delta.`{plain}` t USING (SELECT min(id) AS id FROM "
            f"delta.`{plain}` WHERE status = 'ready') s ON t.id = s.id "
            "WHEN MATCHED THEN UPDATE SET status = 'taken', owner = 'bench'"))
        took["update"] = timed(lambda: spark.sql(
            f"UPDATE delta.`{plain}` SET status = 'done' WHERE id = {i}"))
        return took

    rounds = [one_round(i) for i in range(repeat + 1)][1:]  # the first is the warm-up
    times = {k: [r[k] for r in rounds] for k in ("take", "ack", "merge", "update")}
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"take_1_s": med["take"], "ack_1_s": med["ack"], "merge_1_s": med["merge"],
            "update_1_s": med["update"], "round_trip_s": med["take"] + med["ack"],
            "plain_round_trip_s": med["merge"] + med["update"],
            "round_trip_ratio": (med["take"] + med["ack"]) / (med["merge"] + med["update"]),
            "ack_1_vs_update_ratio": med["ack"] / med["update"]}


@dataclass(frozen=True)
class Sizes:
    """What the section runs: tasks and batches of the drains, round trips' tube size."""

    rows: int = 1_000_000
    batch: int = 100_000
    big_rows: int = 5_000_000  # 0: no big drains
    big_batch: int = 1_000_000
    round_trip_rows: int = 100_000
    repeat: int = 3
    driver_memory: str = "6g"


def bench_e2e(spark: SparkSession, sq: sparkqueue.Queue, root: str, sizes: Sizes,
              say: Callable[[str], None]) -> dict[str, float]:
    """The section's figures (see the module's docstring), named ``e2e_...``."""
    figures: dict[str, float] = {}
    runs = [("plain", sizes.rows, sizes.batch, False),
            ("take_ack", sizes.rows, sizes.batch, True),
            ("consumer", sizes.rows, sizes.batch, True)]
    if sizes.big_rows:
        runs += [(kind, sizes.big_rows, sizes.big_batch, False)
                 for kind in ("take_ack", "consumer")]
    for kind, rows, batch, warm in runs:
        say(f"{kind} of {rows} tasks in batches of {batch} in a new process")
        name = f"e2e_{kind}" if rows == sizes.rows else f"e2e_{kind}_{rows}"
        got = in_new_process(f"{root}/{name}", kind, rows, batch, sizes.repeat, warm,
                             sizes.driver_memory)
        figures.update({f"{name}_{k}": v for k, v in got.items()})
    for phase in ("cold", "warm"):
        figures[f"e2e_put_to_takeable_{phase}_ratio"] = (
            figures[f"e2e_take_ack_{phase}_put_to_takeable_s"] / figures[f"e2e_plain_{phase}_s"])
    say(f"take(1) + ack(1) on {sizes.round_trip_rows} tasks against MERGE + UPDATE")
    trips = round_trips(spark, sq, root, sizes.round_trip_rows, sizes.repeat)
    figures.update({f"e2e_{k}": v for k, v in trips.items()})
    return figures


def main(argv: list[str] | None = None) -> int:
    """A worker process (``--drain``), or the section alone."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drain", choices=DRAINS)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--drain-batch", type=int,
                        default=100_000)
    parser.add_argument("--big-rows", type=int, default=5_000_000)
    parser.add_argument("--big-batch", type=int, default=1_000_000)
    parser.add_argument("--round-trip-rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--warm", action="store_true")
    parser.add_argument("--root", default=None)
    parser.add_argument("--driver-memory", default="6g")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    root = args.root or tempfile.mkdtemp(prefix="sparkqueue-bench-e2e-")
    if args.drain:
        args.root = root
        figures = worker(args)
    else:
        spark = sparkqueue.session(app_name="sparkqueue-benchmark-e2e",
                                   conf={"spark.driver.memory": args.driver_memory})
        sq = sparkqueue.connect(spark, f"{root}/queues", owner="bench")
        sizes = Sizes(args.rows, args.drain_batch, args.big_rows, args.big_batch,
                      args.round_trip_rows, args.repeat, args.driver_memory)
        figures = bench_e2e(spark, sq, root, sizes,
                            lambda what: print(what, file=sys.stderr, flush=True))
        spark.stop()
    emit(figures, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
