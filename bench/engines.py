"""The benchmark's engines section: the portable engine beside the accelerated one.

In one run, on tubes of --rows tasks (fifottl, ingested first), each engine's
figures after a warm-up drain of --drain-warmup tasks on a tube of their own,
the same for every engine, so that none is timed colder than another (the
Connect server is a new process; the classic session has run the engines
before it):

- take(1,000): a median of --repeat runs after a warm-up run, each followed by
  ``release_all``; take(1) and the ack of what it took, as many times, beside
  its baseline: a plain Delta table's UPDATE of one row by id and DELETE of it
  (:func:`plain_update_delete`), as many times;
- a drain of every task by ``take`` and ``ack`` of the taken DataFrame in batches
  of --drain-batch (the README's loop), on a tube whose puts are not ingested
  yet: ingest included;
- a drain of every task by a ``Consumer`` in batches of --drain-batch, in
  tasks per second: what a session that has run a while drains, where a new
  worker's drain, JVM start and warm-up included, is the e2e section's;
- put to takeable: a put of every row into a new tube, then its first take(1),
  less the next take(1), against a plain Delta write of the same rows, medians
  of --repeat of each, in turns (:func:`put_to_takeable`);
- take(1,000) with window 1 on a utubettl tube of 1,000 sub-queues of 100 tasks
  (:func:`sub_queue_take`);

for the accelerated engine and the portable one on the benchmark's classic
session, and for the portable one as a Spark Connect client: a local Spark
Connect server with Delta (:class:`sparkqueue.server.ConnectServer`) and a
client process of its own (pyspark runs one kind of session per process),
which runs this file with ``SPARK_REMOTE`` set. Ratios are each engine's time
over the accelerated engine's. The client also runs take(1,000), take(1) +
ack(1) and the Consumer's drain on a catalog root (``spark_catalog.<schema>``),
each against the same figure on a path root timed in turns with it
(:func:`catalog_figures`), the verbs' medians of at least
:data:`CATALOG_REPEAT` runs.

    python -m bench.engines --rows 1000000 --json out.json   # as a client: SPARK_REMOTE=...
"""

from __future__ import annotations

import argparse
import functools
import itertools
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
    return interleaved(repeat, {"": (fn, after)})[""]


def interleaved(repeat: int, runs: dict[str, tuple[Callable[[], Any], Callable[[], Any] | None]],
                ) -> dict[str, float]:
    """:func:`medians` of each of ``runs`` (name: what is timed, what runs after it,
    untimed), their runs taken in turns (:func:`in_turns`)."""
    def measured(fn: Callable[[], Any], after: Callable[[], Any] | None) -> Callable[[], float]:
        def run() -> float:
            took = timed(fn)
            if after is not None:
                after()
            return took
        return run
    return in_turns(repeat, {name: measured(*run) for name, run in runs.items()})


def in_turns(repeat: int, runs: dict[str, Callable[[], float]]) -> dict[str, float]:
    """The median of ``repeat`` runs of each of ``runs`` (name: a run, which gives its
    own seconds) after a warm-up run, taken in turns, the order reversed every
    other turn, so that none of them gains from coming later in a warming
    session."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for i in range(repeat + 1):
        for name in (list(runs) if i % 2 == 0 else list(reversed(runs))):
            took = runs[name]()
            if i:  # the first turn is the warm-up
                times[name].append(took)
    return {name: statistics.median(t) for name, t in times.items()}


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


def verb_figures(queues: dict[str, sparkqueue.Queue], rows: DataFrame,
                 repeat: int) -> dict[str, float]:
    """take(1,000) and take(1) + ack(1) on a tube of ``rows``, ingested first, in each
    of ``queues`` (figure prefix: its Queue), their runs in turns (:func:`interleaved`)."""
    tubes = {prefix: ingested(sq, f"{prefix}take", "fifottl", rows)
             for prefix, sq in queues.items()}
    figures: dict[str, float] = {}
    for figure, verb, after in (
            ("take_1000", lambda t: t.take(1000), lambda t: t.release_all),
            ("take_ack_1", lambda t: t.ack(t.take(1)), lambda t: None)):
        took = interleaved(repeat, {prefix: (functools.partial(verb, tube), after(tube))
                                    for prefix, tube in tubes.items()})
        figures.update({f"{prefix}{figure}_s": s for prefix, s in took.items()})
    return figures


def consumer_drain(sq: sparkqueue.Queue, rows: DataFrame, prefix: str,
                   batch: int) -> dict[str, float]:
    """A Consumer's drain of a tube of ``rows``, ingested first."""
    drained = ingested(sq, f"{prefix}drain", "fifottl", rows)
    start = time.perf_counter()
    done = consume_all(drained, batch)
    took = time.perf_counter() - start
    return {f"{prefix}drain_s": took, f"{prefix}drain_tasks": done,
            f"{prefix}drain_tasks_per_s": done / took}


def put_to_takeable(sq: sparkqueue.Queue, rows: DataFrame, prefix: str,
                    repeat: int) -> dict[str, float]:
    """Put of ``rows`` into a new tube, then its first take(1), less the next take(1):
    what a put costs until its tasks can be taken. Its baseline: a plain Delta
    write of the same rows into a new table. Each the median of --repeat runs
    after a warm-up run, puts and writes in turns (:func:`in_turns`), each put
    into a tube of its own."""
    turns = itertools.count()

    def put_then_take() -> float:
        tube = sq.create_tube(f"{prefix}fresh{next(turns)}", "fifottl")
        put = timed(lambda: tube.put(rows))
        first = timed(lambda: tube.take(1))
        return put + first - timed(lambda: tube.take(1))

    def write() -> float:
        return timed(lambda: rows.write.format("delta").save(
            f"{sq.root}/{prefix}written_{next(turns)}"))

    took = in_turns(repeat, {"put": put_then_take, "write": write})
    put, written = took["put"], took["write"]
    return {f"{prefix}put_to_takeable_s": put, f"{prefix}plain_write_s": written,
            f"{prefix}put_to_takeable_ratio": put / written}


def sub_queue_take(sq: sparkqueue.Queue, prefix: str, repeat: int,
                   queues: int = 1000, each: int = 100) -> dict[str, float]:
    """take(``queues``) with window 1 on a utubettl tube of ``queues`` sub-queues of
    ``each`` tasks, ingested first: one task from the head of every sub-queue."""
    rows = sq.spark.range(queues * each).select(
        F.col("id").alias("n"), (F.col("id") % queues).cast("string").alias("q"))
    tube = ingested(sq, f"{prefix}utube", "utubettl", rows)
    return {f"{prefix}utube_take_w1_s": medians(
        repeat, lambda: tube.take(queues, window=1), tube.release_all)}


def bench_engine(sq: sparkqueue.Queue, rows: DataFrame, prefix: str, batch: int,
                 repeat: int, warmup: int) -> dict[str, float]:
    """take(1000), take(1) + ack(1), a drain by take + ack, a Consumer drain, put to
    takeable and a sub-queue take on ``sq``'s engine; figures named ``prefix``...
    ``warmup``: tasks drained on a tube of their own before anything is timed."""
    if warmup:
        consume_all(ingested(sq, f"{prefix}warmup", "fifottl", rows.limit(warmup)), batch)
    figures = verb_figures({prefix: sq}, rows, repeat)
    figures[f"{prefix}plain_update_delete_1_s"] = plain_update_delete(
        sq.spark, f"{sq.root}/{prefix}plain", rows, repeat)
    figures[f"{prefix}take_ack_1_vs_plain_ratio"] = (figures[f"{prefix}take_ack_1_s"]
                                                     / figures[f"{prefix}plain_update_delete_1_s"])
    looped = sq.create_tube(f"{prefix}loop", "fifottl")
    looped.put(rows)
    start = time.perf_counter()
    done = take_ack_all(looped, batch)
    figures[f"{prefix}loop_drain_s"] = time.perf_counter() - start
    figures[f"{prefix}loop_drain_tasks_per_s"] = done / figures[f"{prefix}loop_drain_s"]
    figures.update(consumer_drain(sq, rows, prefix, batch))
    figures.update(put_to_takeable(sq, rows, prefix, repeat))
    figures.update(sub_queue_take(sq, prefix, repeat))
    return figures


#: The fewest runs whose median a catalog figure takes: its ratio is near 1 and its
#: bound 1.1, close enough that the median of a few runs would meet it or not by
#: the host's noise.
CATALOG_REPEAT = 9


def catalog_figures(spark: SparkSession, root: str, rows: DataFrame, batch: int,
                    repeat: int) -> dict[str, float]:
    """take(1,000), take(1) + ack(1) and a Consumer's drain on a catalog root
    (``spark_catalog.<schema>``: managed tables), each over the same figure on a
    path root under ``root`` (``connect_catalog_path_``) as a ratio: the verbs'
    runs (``repeat``, at least :data:`CATALOG_REPEAT`) in turns with the path
    root's, the drains one after the other; run after :func:`bench_engine`,
    both on a warm session."""
    catalog = sparkqueue.connect(spark, f"spark_catalog.sq_bench_{os.getpid()}", owner="bench")
    path = sparkqueue.connect(spark, f"{root}/again", owner="bench")
    figures = verb_figures({"connect_catalog_": catalog, "connect_catalog_path_": path},
                           rows, max(repeat, CATALOG_REPEAT))
    for sq, prefix in ((catalog, "connect_catalog_"), (path, "connect_catalog_path_")):
        figures.update(consumer_drain(sq, rows, prefix, batch))
    for figure in ("take_1000", "take_ack_1", "drain"):
        figures[f"connect_catalog_{figure}_ratio"] = (
            figures[f"connect_catalog_{figure}_s"] / figures[f"connect_catalog_path_{figure}_s"])
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
        for figure in ("take_1000", "take_ack_1", "loop_drain", "drain", "utube_take_w1"):
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
    ("connect_utube_take_w1_ratio", 1.0, "a utubettl tube's take with window 1 over 1,000 "
     "sub-queues no slower than the accelerated engine's"),
    *((f"connect_catalog_{figure}_ratio", 1.1, f"{what} on a catalog root within 10% of a "
       "path root") for figure, what in (("take_1000", "take(1,000)"),
                                         ("take_ack_1", "take(1) + ack(1)"),
                                         ("drain", "a Consumer's drain"))),
    *((f"{engine}_put_to_takeable_ratio", 1.5, f"{engine}: put of the rows then the first "
       "take(1), less the next, at most 1.5x a plain Delta write of them")
      for engine in ("accelerated", "portable", "connect")),
)


def over_connect(root: str, n: int, batch: int, repeat: int,
                 warmup: int) -> dict[str, float]:
    """:func:`bench_engine` in a Spark Connect client process of a local server."""
    out = Path(tempfile.mkdtemp(prefix="sparkqueue-bench-connect-")) / "figures.json"
    server = ConnectServer(conf={"spark.driver.memory": "6g",
                                 # where the catalog root's managed tables go
                                 "spark.sql.warehouse.dir": str(out.parent / "warehouse")},
                           log=out.parent / "server.log")
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
    figures.update(catalog_figures(spark, args.root, rows, args.drain_batch, args.repeat))
    Path(args.json).write_text(json.dumps({k: v for k, v in figures.items()
                                           if not isinstance(v, str)}))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
