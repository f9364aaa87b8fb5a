"""The benchmark's shards section: consumers in separate Spark applications at once.

In one run:

- drains of --shard-rows tasks (fifottl, put as four puts, so one per shard of a
  four-shard tube) by ``Consumer`` loops in batches of --shard-batch, each
  consumer a Python process with a local Spark of its own: four consumers on
  a four-shard tube, one consumer on a four-shard tube, and four consumers on
  a tube of one shard (today's single tasks table, whose consumers conflict
  at every commit: --shard-single-rows tasks, fewer, as it drains far more
  slowly; its figures are rates all the same). For each: tasks per
  second from the moment all consumers are ready (session started, tube
  opened) to the last one's end, and Delta conflicts retried per take (by
  every consumer, over all their takes). Ratios: four consumers against one
  on the sharded tube (tasks per second), and the conflicts per take of the
  sharded tube against the single table's. How busy the machine's cores were
  during each (``cpu_busy``, from Linux's /proc/stat): where one consumer
  already keeps them busy, more consumers can only share them.
- the same with sub-queues: a utubettl tube of 16 sub-queues of --utube-each
  tasks, taken with window 1 (one task per free sub-queue), four consumers,
  on four shards against one.
- the first two again with each consumer's JVM compiling with C1 alone
  (``-XX:TieredStopAtLevel=1``, :data:`C1_ONLY`): the optimising C2
  compiler keeps compiling through a new consumer's first hundreds of
  batches of 1,000 (each run's ``jit_s``: the consumers' JIT seconds during
  the drain), so four new JVMs on two cores spend much of them compiling. C1's code is
  slower: ``shards_c1_1x4`` against ``shards_1x4`` shows what that costs one
  consumer.
- how the drain grows with cores: one consumer held to one core (Linux's CPU
  affinity, ``local[1]``) against two consumers each held to a core of its
  own, on a four-shard tube of --cores-rows tasks (``shards_cores_2_over_1_ratio``,
  tasks per second). Where the machine has fewer than two cores, not run.

Consumers' owners are chosen so that each starts at a shard of its own
(``engine.shards.home_shard``); each moves on to the others' shards when
its own is empty. Before it says it is ready, each consumer drains a tube of
its own of the same driver the same way (--warmup tasks; for utubettl, a few
rounds of its sub-queues), so that what is timed is consumers that have run
for a while (a new JVM spends its first minutes compiling the code it runs:
four at once on two cores compile more than they drain).

    python -m bench.shards --json out.json                     # the section alone
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pyspark.sql import functions as F

import sparkqueue
from bench import REPO, emit
from bench.e2e import jit_seconds
from bench.engines import payload
from sparkqueue.engine.shards import home_shard

#: Consumers of the parallel runs, and the shards of the sharded tubes.
CONSUMERS = 4
SHARDS = 4
#: Sub-queues of the utube runs.
SUB_QUEUES = 16
#: Tasks per sub-queue of a utube consumer's warm-up tube.
WARM_ROUNDS = 4
#: The JVM option of the consumers of the C1 runs: the JIT's quick compiler alone.
C1_ONLY = "-XX:TieredStopAtLevel=1"


def sub_queues(spark: Any, each: int) -> Any:
    """``SUB_QUEUES * each`` rows ``n`` with their sub-queue ``q``, round robin."""
    return spark.range(SUB_QUEUES * each).select(
        F.col("id").alias("n"), (F.col("id") % SUB_QUEUES).cast("string").alias("q"))


def owners(count: int, shards: int) -> list[str]:
    """``count`` owner names whose takes start at shards of their own while there are
    shards left (``engine.shards.home_shard``)."""
    names: list[str] = []
    homes: set[int] = set()
    i = 0
    while len(names) < count:
        name, i = f"consumer-{i}", i + 1
        home = home_shard(name, shards)
        if home not in homes or len(homes) == shards:
            homes.add(home)
            names.append(name)
    return names


def warm_up(spark: Any, args: argparse.Namespace) -> None:
    """Drain a tube of the consumer's own, of the timed tube's driver, the same way."""
    warm = sparkqueue.connect(spark, f"{args.root}-warmup/{args.tube}/{args.owner}",
                              owner=args.owner)
    warming = warm.create_tube("warmup", args.driver)
    if args.driver == "utubettl":
        warming.put(sub_queues(spark, WARM_ROUNDS), utube=F.col("q"))
    else:
        warming.put(payload(spark, args.warmup))
    sparkqueue.Consumer(warming, lambda batch: None, batch_size=args.batch,
                        take_timeout=0, idle_timeout=0).run()


def worker(args: argparse.Namespace) -> dict[str, float]:
    """One consumer: start, open the tube, say ready, wait for the go, drain; figures.

    With ``--cpu k`` the process and its JVM (which inherits the affinity) run on
    core ``k`` alone, with a Spark of one task slot."""
    master = None
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
        master = "local[1]"
    spark = sparkqueue.session(app_name=f"sparkqueue-bench-{args.owner}", master=master)
    sq = sparkqueue.connect(spark, args.root, owner=args.owner)
    tube = sq.tube(args.tube)
    if args.warmup:
        warm_up(spark, args)
    Path(args.ready).write_text("ready")
    while not os.path.exists(args.go):
        time.sleep(0.05)
    conflicts = sum(part.context.conflicts for part in tube.parts)
    compiling = jit_seconds(spark)
    progress = sparkqueue.Consumer(tube, lambda batch: None, batch_size=args.batch,
                                   take_timeout=0, idle_timeout=0).run()
    ended = time.time()
    compiled = jit_seconds(spark) - compiling
    Path(f"{args.ready}.done").write_text("done")  # before the stop: cpu_busy's window
    spark.stop()
    return {"done": progress.done, "takes": progress.batches + 1, "ended": ended,
            "conflicts": sum(part.context.conflicts for part in tube.parts) - conflicts,
            "jit_s": compiled}


def cpu_times() -> tuple[int, int] | None:
    """The machine's CPU time so far, all cores (total and idle, in clock ticks), from
    Linux's /proc/stat; None elsewhere."""
    try:
        with open("/proc/stat") as stat:
            ticks = [int(x) for x in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    ticks = ticks[:8]  # user .. steal: the guest times are counted in user already
    return sum(ticks), ticks[3] + ticks[4]  # idle and iowait


def drain_together(root: str, tube: str, count: int, shards: int, batch: int,
                   warmup: int, driver: str = "fifottl",
                   pinned: bool = False, jvm_options: str = "") -> dict[str, float]:
    """``count`` consumer processes draining ``tube`` at once: tasks per second from
    the go to the last one's end, conflicts retried per take, the seconds their
    JVMs' JIT compilers spent meanwhile (``jit_s``, all together), and how busy the
    machine's cores were meanwhile (``cpu_busy``, 0 to 1: a single consumer
    near 1 leaves no room for more consumers to go faster). ``pinned``: consumer
    ``k`` runs on core ``k`` alone (``--cpu``). ``jvm_options``: for each consumer's
    JVM (in ``SPARK_SUBMIT_OPTS``, which spark-submit gives it)."""
    work = Path(tempfile.mkdtemp(prefix="sparkqueue-bench-shards-"))
    env = dict(os.environ)
    if jvm_options:
        env["SPARK_SUBMIT_OPTS"] = f"{env.get('SPARK_SUBMIT_OPTS', '')} {jvm_options}".strip()
    go = work / "go"
    procs = []
    for k, owner in enumerate(owners(count, shards)):
        pin = ["--cpu", str(k)] if pinned else []
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "bench.shards", "--worker", "--root", root, "--tube", tube,
             "--owner", owner, "--batch", str(batch), "--warmup", str(warmup),
             "--driver", driver, *pin, "--ready", str(work / f"ready{k}"),
             "--go", str(go), "--json", str(work / f"out{k}.json")], env=env, cwd=REPO))
    while not all((work / f"ready{k}").exists() for k in range(count)):
        if any(p.poll() not in (None, 0) for p in procs):
            raise RuntimeError(f"a consumer of {tube!r} failed to start")
        time.sleep(0.2)
    started = time.time()
    before = cpu_times()
    go.write_text("go")
    while not all((work / f"ready{k}.done").exists() for k in range(count)):
        if any(p.poll() not in (None, 0) for p in procs):
            break  # the wait below says which
        time.sleep(0.05)
    after = cpu_times()  # the drains' end, not the sessions' stop
    for p in procs:
        if p.wait() != 0:
            raise RuntimeError(f"a consumer of {tube!r} exited with {p.returncode}")
    outs = [json.loads((work / f"out{k}.json").read_text()) for k in range(count)]
    done = sum(o["done"] for o in outs)
    seconds = max(o["ended"] for o in outs) - started
    figures = {"tasks": done, "s": seconds, "tasks_per_s": done / seconds,
               "jit_s": sum(o["jit_s"] for o in outs),
               "conflicts_per_take": sum(o["conflicts"] for o in outs) / sum(
                   o["takes"] for o in outs)}
    if before and after and after[0] > before[0]:
        figures["cpu_busy"] = 1 - (after[1] - before[1]) / (after[0] - before[0])
    return figures


def fill(sq: sparkqueue.Queue, name: str, rows: Any, shards: int,
         utube: bool = False) -> None:
    """A new tube holding ``rows``: for fifottl, as ``SHARDS`` puts (one per shard
    of a sharded tube); for utubettl, one put, each row to its sub-queue."""
    tube = sq.create_tube(name, "utubettl" if utube else "fifottl", shards=shards)
    if utube:
        tube.put(rows, utube=F.col("q"))
        return
    parts = rows.withColumn("_part", F.col("n") % SHARDS).localCheckpoint(eager=True)
    for k in range(SHARDS):
        tube.put(parts.where(F.col("_part") == k).drop("_part"))


def bench_shards(spark: Any, root: str, rows: int, batch: int, each: int, warmup: int,
                 say: Any, single_rows: int = 20_000,
                 cores_rows: int = 100_000) -> dict[str, float]:
    """The section's figures (see the module's docstring)."""
    sq = sparkqueue.connect(spark, root, owner="bench")
    figures: dict[str, float] = {}
    runs = {"shards_4x4": (CONSUMERS, SHARDS, rows, ""), "shards_1x4": (1, SHARDS, rows, ""),
            "shards_4x1": (CONSUMERS, 1, single_rows, ""),
            "shards_c1_4x4": (CONSUMERS, SHARDS, rows, C1_ONLY),
            "shards_c1_1x4": (1, SHARDS, rows, C1_ONLY)}
    for name, (count, shards, tasks, jvm) in runs.items():
        say(f"{count} consumer(s) draining {tasks} tasks of a tube of {shards} shard(s)"
            + (f", JVM {jvm}" if jvm else ""))
        fill(sq, name, payload(spark, tasks).localCheckpoint(eager=True), shards)
        for key, value in drain_together(root, name, count, shards, batch, warmup,
                                         jvm_options=jvm).items():
            figures[f"{name}_{key}"] = value
            say(f"  {name}_{key}: {value:.3f}")
    for c1 in ("", "_c1"):
        figures[f"shards{c1}_4_consumers_over_1_ratio"] = (
            figures[f"shards{c1}_4x4_tasks_per_s"] / figures[f"shards{c1}_1x4_tasks_per_s"])
    for shards in (SHARDS, 1):
        name = f"shards_utube_4x{shards}"
        say(f"{CONSUMERS} consumers, window 1, {SUB_QUEUES} sub-queues over {shards} shard(s)")
        fill(sq, name, sub_queues(spark, each), shards, utube=True)
        for key, value in drain_together(root, name, CONSUMERS, shards, batch,
                                         warmup, "utubettl").items():
            figures[f"{name}_{key}"] = value
            say(f"  {name}_{key}: {value:.3f}")
    figures["shards_utube_4_shards_over_1_ratio"] = (
        figures["shards_utube_4x4_tasks_per_s"] / figures["shards_utube_4x1_tasks_per_s"])
    if cores_rows and len(os.sched_getaffinity(0)) >= 2:
        figures.update(bench_cores(spark, sq, root, cores_rows, batch, warmup, say))
    return figures


def bench_cores(spark: Any, sq: sparkqueue.Queue, root: str, rows: int, batch: int,
                warmup: int, say: Any) -> dict[str, float]:
    """One consumer on one core against two consumers on a core each, on a tube of
    ``SHARDS`` shards: how the drain grows with cores."""
    figures: dict[str, float] = {}
    for count in (1, 2):
        name = f"shards_cores_{count}"
        say(f"{count} consumer(s), each held to a core of its own, draining {rows} tasks")
        fill(sq, name, payload(spark, rows).localCheckpoint(eager=True), SHARDS)
        for key, value in drain_together(root, name, count, SHARDS, batch, warmup,
                                         pinned=True).items():
            figures[f"{name}_{key}"] = value
            say(f"  {name}_{key}: {value:.3f}")
    figures["shards_cores_2_over_1_ratio"] = (
        figures["shards_cores_2_tasks_per_s"] / figures["shards_cores_1_tasks_per_s"])
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help="run one consumer (internal)")
    parser.add_argument("--root", default=None)
    parser.add_argument("--tube", default=None)
    parser.add_argument("--owner", default=None)
    parser.add_argument("--ready", default=None)
    parser.add_argument("--go", default=None)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--single-rows", type=int, default=20_000,
                        help="tasks of the drain by four consumers of a tube of one shard")
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--utube-each", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=10_000,
                        help="tasks each consumer drains from a tube of its own first")
    parser.add_argument("--cores-rows", type=int, default=100_000,
                        help="tasks of the drains by consumers held to a core each (0: none)")
    parser.add_argument("--driver", default="fifottl", help="the tube's driver (internal)")
    parser.add_argument("--cpu", type=int, default=None,
                        help="the core the consumer runs on (internal)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.worker:
        figures = worker(args)
    else:
        spark = sparkqueue.session(app_name="sparkqueue-benchmark-shards")
        root = args.root or tempfile.mkdtemp(prefix="sparkqueue-bench-shards-")
        figures = bench_shards(spark, f"{root}/queues", args.rows, args.batch,
                               args.utube_each, args.warmup,
                               lambda line: print(line, flush=True), args.single_rows,
                               args.cores_rows)
        spark.stop()
    emit(figures, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
