"""The soak: one tube through many small rounds, as a queue lives for months.

Each round puts --batch tasks into one fifottl tube, takes them and acks
them; the Queue's clock moves a second a round, and a sweeper pass runs every
--sweep-every rounds with compaction every --compact-every rounds and VACUUM
(no retention) every --vacuum-every rounds, as the sweeper on its schedule
would. On each engine (the accelerated and the portable, on a classic
session), on a local folder and on S3 (a local S3-compatible server started for
it; the run on S3 is a Spark application of its own, its session built for S3):

- the median round of each tenth of the rounds (after a warm-up of a
  twentieth of them, untimed), the first tenth's and the last's and their
  ratio (target: at most 1.2x), and the slowest round;
- the tables' data files at each sweep (those the tables reference, and those
  on storage) and the most of each over the run (bounded: compaction and
  VACUUM doing their job);
- the log's length (commit files kept) and its checkpoints at the end.

    python -m bench.soak --rounds 2000 --where local,s3 --json out.json
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
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

import sparkqueue
from bench import REPO, emit
from sparkqueue import Config, FakeClock
from sparkqueue.s3gateway import S3Gateway
from sparkqueue.store import RETENTION_CHECK

ENGINES = ("accelerated", "portable")
WHERE = ("local", "s3")
#: The soak's targets: (figure, bound, what), as bench.engines's
TARGETS = tuple(
    (f"soak_{where}_{engine}_last_tenth_ratio", 1.2,
     f"the soak on {'a local folder' if where == 'local' else 'S3'}, {engine} engine: "
     "the last tenth's rounds at most 1.2x the first tenth's")
    for where in WHERE for engine in ENGINES)
#: the soak's round, its sweep and what it samples, as defaults of the command line
DEFAULTS = {"rounds": 2000, "batch": 10, "sweep_every": 50, "compact_every": 100,
            "vacuum_every": 500}


def scaled(rounds: int) -> dict[str, int]:
    """:data:`DEFAULTS` for a soak of ``rounds``: its sweeps, compactions and VACUUMs
    as many per round (a shorter soak still compacts and vacuums)."""
    share = rounds / DEFAULTS["rounds"]
    return {**DEFAULTS, "rounds": rounds,
            **{k: max(1, round(DEFAULTS[k] * share))
               for k in ("sweep_every", "compact_every", "vacuum_every")}}


def storage(spark: SparkSession, folder: str) -> dict[str, int]:
    """What the tables under ``folder`` keep on storage: data files, commit files and
    checkpoint files (a listing through Hadoop's file system: local or S3A)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    path = jvm.org.apache.hadoop.fs.Path(folder)
    listed = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).listFiles(
        path, True)
    counts = {"data_files": 0, "log_commits": 0, "checkpoints": 0}
    while listed.hasNext():
        where = str(listed.next().getPath())
        name = where.rsplit("/", 1)[-1]
        if "/_delta_log/" in where:
            counts["log_commits"] += name.endswith(".json") and name[:20].isdigit()
            counts["checkpoints"] += ".checkpoint." in name
        elif name.endswith(".parquet"):
            counts["data_files"] += 1
    return counts


def referenced(spark: SparkSession, tables: list[str]) -> int:
    """Data files the tables' newest snapshots reference."""
    found = 0
    for table in tables:
        row = spark.sql(f"DESCRIBE DETAIL delta.`{table}`").first()
        assert row is not None
        found += int(row["numFiles"])
    return found


def soak(spark: SparkSession, root: str, engine: str, **sizes: int) -> dict[str, Any]:
    """One engine's soak on a new root: its figures (see the module's docstring).

    VACUUM keeps no removed file: the soak is one process, and no write is in
    flight while it sweeps (a sweeper beside writers keeps Delta's 168 hours).
    """
    spark.conf.set(RETENTION_CHECK, "false")
    try:
        return rounds_of(spark, root, engine, **sizes)
    finally:
        spark.conf.unset(RETENTION_CHECK)


def rounds_of(spark: SparkSession, root: str, engine: str, rounds: int, batch: int,
              sweep_every: int, compact_every: int, vacuum_every: int) -> dict[str, Any]:
    """:func:`soak`'s rounds."""
    clock = FakeClock(1_700_000_000.0)
    config = Config(compact_interval=float(compact_every), vacuum_interval=float(vacuum_every),
                    vacuum_retention_hours=0.0)
    sq = sparkqueue.connect(spark, root, owner="soak", clock=clock, config=config,
                            engine=engine)
    tube = sq.create_tube("soak", "fifottl", ttr=3600)
    layout = tube.context.layout
    tables = [layout.inbox(tube.context.key), layout.tasks(tube.context.key)]
    folder = layout.tube_dir(tube.name)
    rows = [{"n": i, "url": f"https://example.com/item/{i}"} for i in range(batch)]
    times: list[float] = []
    most = {"referenced": 0, "data_files": 0}
    acked = 0
    warmup = max(5, rounds // 20)  # rounds before the first timed: the JVM compiles
    for done in range(1 - warmup, rounds + 1):
        start = time.perf_counter()
        tube.put(rows)
        taken = tube.take(batch)
        acked += tube.ack(taken).count()
        if done > 0:
            times.append(time.perf_counter() - start)
        clock.advance(1.0)
        if done > 0 and done % sweep_every == 0:
            sq.sweep()
            most["referenced"] = max(most["referenced"], referenced(spark, tables))
            most["data_files"] = max(most["data_files"], storage(spark, folder)["data_files"])
    tenth = max(1, rounds // 10)
    tenths = [statistics.median(times[i:i + tenth]) for i in range(0, len(times), tenth)]
    first, last = tenths[0], tenths[-1]
    end = storage(spark, folder)
    assert acked == (rounds + warmup) * batch, f"{acked} of {(rounds + warmup) * batch} acked"
    return {"rounds": rounds, "tenths_s": " ".join(f"{t:.2f}" for t in tenths),
            "first_tenth_s": first, "last_tenth_s": last,
            "last_tenth_ratio": last / first, "slowest_s": max(times),
            "most_referenced_files": most["referenced"], "most_data_files": most["data_files"],
            "data_files": end["data_files"], "log_commits": end["log_commits"],
            "checkpoints": end["checkpoints"]}


def soak_engines(spark: SparkSession, root: str, prefix: str, **sizes: int) -> dict[str, Any]:
    """:func:`soak` on each engine, on roots under ``root``, its figures prefixed."""
    figures: dict[str, Any] = {}
    for engine in ENGINES:
        found = soak(spark, f"{root}/{engine}", engine, **sizes)
        figures.update({f"soak_{prefix}_{engine}_{k}": v for k, v in found.items()})
    return figures


def soak_s3(root: str, **sizes: int) -> dict[str, Any]:
    """:func:`soak_engines` on a local gateway's bucket, in an application of its own
    (its session needs S3A from the start)."""
    work = Path(tempfile.mkdtemp(prefix="sparkqueue-soak-s3-", dir=root))
    out = work / "figures.json"
    with S3Gateway(work / "objects") as gateway:
        subprocess.run([sys.executable, "-m", "bench.soak", "--where", "s3",
                        "--s3-root", gateway.root("soak"), "--json", str(out),
                        *[f"--{k.replace('_', '-')}={v}" for k, v in sizes.items()]],
                       env={**os.environ, **gateway.env}, cwd=REPO, check=True)
    figures: dict[str, Any] = json.loads(out.read_text())
    return figures


def run(spark: SparkSession | None, root: str, where: list[str], **sizes: int) -> dict[str, Any]:
    """The soak on each of ``where`` (``local``, ``s3``)."""
    figures: dict[str, Any] = {}
    if "local" in where:
        assert spark is not None
        figures.update(soak_engines(spark, f"{root}/local", "local", **sizes))
    if "s3" in where:
        figures.update(soak_s3(root, **sizes))
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for key, value in DEFAULTS.items():
        parser.add_argument(f"--{key.replace('_', '-')}", type=int, default=value)
    parser.add_argument("--where", default="local,s3", help="local, s3 or both")
    parser.add_argument("--root", default=None, help="default: a temp dir")
    parser.add_argument("--s3-root", default=None,
                        help="an s3a:// root for this application (its session built for it)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    sizes = {k: getattr(args, k) for k in DEFAULTS}
    if args.s3_root is not None:  # the S3 application soak_s3 starts
        s3 = sparkqueue.session(app_name="sparkqueue-soak-s3", root=args.s3_root,
                                conf={"spark.sql.shuffle.partitions": "2"})
        figures = soak_engines(s3, args.s3_root, "s3", **sizes)
    else:
        where = args.where.split(",")
        spark = (sparkqueue.session(app_name="sparkqueue-soak",
                                    conf={"spark.sql.shuffle.partitions": "2"})
                 if "local" in where else None)
        figures = run(spark, args.root or tempfile.mkdtemp(prefix="sparkqueue-soak-"), where,
                      **sizes)
    emit(figures, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
