"""Where an operation's time goes: Spark jobs, Delta commits and wall time per verb.

On a local Spark (classic: it reads Spark's job store and code generator
through the JVM), a fifottl tube of --tasks tasks, each verb run --repeat
times after a warm-up run; per verb the median wall time, the median time
inside its Spark jobs (the rest is the driver's: planning, generating code,
committing), the median count of whole-stage code compilations and, of its
run with the median job count, the Spark jobs it ran, the commits it made to
the tube's inbox and tasks tables, and what each job was for (its
description: Delta names its own jobs, for example "Compute snapshot for
version: N" for a rebuild of a table's state, "Filtering files for query"
for data skipping). Then a drain of new puts: --drain-rows tasks in one put,
taken and acked in batches of --drain-batch (0: none): the new tube's first
batch apart, the others after a warm-up batch. Then takes of sub-queue heads:
a utubettl tube of --sub-queues sub-queues (0: none), take(that many) with
window 1 and its ack, with the heads consecutive ids and not (docs/design.md,
"Where a verb's time goes", names the groups).

    python -m bench.profile_ops [--tasks 100000] [--repeat 5] [--engine portable]
"""

from __future__ import annotations

import argparse
import collections
import functools
import re
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import sparkqueue


def job_descriptions(spark: SparkSession, group: str, verb: str) -> tuple[list[str], float]:
    """What each Spark job of job group ``group`` (described as ``verb``) was for, in
    the order they ran: Delta's name for its own jobs, else sparkqueue's; and the
    seconds in which any of them ran."""
    store = spark._jsparkSession.sparkContext().statusStore()
    tracker = spark.sparkContext.statusTracker()
    out, spans = [], []
    for job in sorted(tracker.getJobIdsForGroup(group)):
        data = store.job(job)
        text = re.sub(r"^Some\((.*)\)$", r"\1", str(data.description()))
        text = re.sub(r"^(Delta: )+", "", text).removeprefix(verb).lstrip(":- ")
        # a name Delta gives a stage of its command also carries the command's
        out.append(text.removeprefix("Delta: ") or "sparkqueue (a read, write or collect)")
        if data.submissionTime().isDefined() and data.completionTime().isDefined():
            spans.append((data.submissionTime().get().getTime(),
                          data.completionTime().get().getTime()))
    busy, end = 0, 0  # jobs may overlap: count each millisecond once
    for first, last in sorted(spans):
        busy += max(0, last - max(first, end))
        end = max(end, last)
    return out, busy / 1000


def compilations(spark: SparkSession) -> int:
    """How many classes Spark's code generator has compiled in this JVM so far."""
    metrics = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics  # type: ignore[union-attr]
    return int(metrics.METRIC_COMPILATION_TIME().getCount())


class Run(NamedTuple):
    """One run of a verb: wall seconds, seconds inside Spark jobs, classes compiled,
    what its jobs were for, its commits."""

    took: float
    in_jobs: float
    compiled: int
    jobs: list[str]
    commits: int


class Profile:
    """Runs verbs in job groups of their own and keeps what each cost."""

    def __init__(self, spark: SparkSession, tube: sparkqueue.Tube) -> None:
        self.spark, self.tube = spark, tube
        self.runs: dict[str, list[Run]] = collections.defaultdict(list)

    def commits(self) -> int:
        layout = self.tube.context.layout
        name = self.tube.name
        return layout.latest_version(layout.inbox(name)) + layout.latest_version(
            layout.tasks(name))

    def run(self, verb: str, fn: Callable[[], Any]) -> Any:
        group = f"{verb}-{time.monotonic_ns()}"
        self.spark.sparkContext.setJobGroup(group, verb)
        before, compiled = self.commits(), compilations(self.spark)
        start = time.perf_counter()
        result = fn()
        took = time.perf_counter() - start
        compiled = compilations(self.spark) - compiled
        jobs, in_jobs = job_descriptions(self.spark, group, verb)
        self.runs[verb].append(Run(took, in_jobs, compiled, jobs, self.commits() - before))
        self.spark.sparkContext.setJobGroup("", "")
        return result

    def report(self) -> str:
        """A Markdown table: per verb, median seconds, then the jobs, commits and jobs'
        purposes of its run with the median job count (the warm-up run left out):
        the run that writes a Delta checkpoint, one commit in ten, has more jobs
        than the others, and a verb's last run may be that one."""
        lines = ["| verb | median s | in jobs s | compiled | Spark jobs | commits | "
                 "jobs, in order |", "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
        for verb, runs in self.runs.items():
            timed = runs[1:] or runs
            mid = sorted(timed, key=lambda r: len(r.jobs))[(len(timed) - 1) // 2]
            lines.append(f"| {verb} | {statistics.median(r.took for r in timed):.2f} | "
                         f"{statistics.median(r.in_jobs for r in timed):.2f} | "
                         f"{statistics.median(r.compiled for r in timed):g} | "
                         f"{len(mid.jobs)} | {mid.commits} | {'; '.join(mid.jobs)} |")
        return "\n".join(lines)


def one_round(profile: Profile, tube: sparkqueue.Tube) -> None:
    """Each verb once, on tasks of the tube's head."""
    profile.run("put(1)", lambda: tube.put({"n": -1}))
    profile.run("take(1) ingesting put(1)", lambda: tube.take(1))
    taken = profile.run("take(1)", lambda: tube.take(1))
    profile.run("ack(1)", lambda: tube.ack(taken))
    thousand = profile.run("take(1,000)", lambda: tube.take(1000))
    profile.run("ack(1,000)", lambda: tube.ack(thousand))
    released = profile.run("take(1) to release", lambda: tube.take(1))
    profile.run("release(1)", lambda: tube.release(released))
    buried = profile.run("take(1) to bury", lambda: tube.take(1))
    profile.run("bury(1)", lambda: tube.bury(buried))
    profile.run("kick(1)", lambda: tube.kick(1))
    profile.run("peek(1)", lambda: tube.peek(buried).collect())
    profile.run("statistics", tube.statistics)


def drain(profile: Profile, sq: sparkqueue.Queue, rows: int, batch: int) -> None:
    """A drain of new puts: ``rows`` tasks in one put (not profiled), then
    take(``batch``) + ack until none is left; the new tube's first batch apart
    (where its first ingest added the payload column with its files, Delta's checksum
    holds no file list and the first ack rebuilds the table's state)."""
    tube = sq.create_tube("drain", "fifottl")
    profile.tube = tube  # its commits are the ones counted from here on
    tube.put(profile.spark.range(rows).toDF("n"))
    verb = f"{batch:,}"
    for k in range(rows // batch):
        first = ", the tube's first" if k == 0 else ""
        taken = profile.run(f"take({verb}) of new puts{first}", lambda: tube.take(batch))
        profile.run(f"ack({verb}){first}", functools.partial(tube.ack, taken))


def sub_queues(profile: Profile, sq: sparkqueue.Queue, queues: int, rounds: int) -> None:
    """A utubettl tube of ``queues`` sub-queues (tasks put round robin, so that each
    round's heads are consecutive ids, and again with each sub-queue's tasks put
    together, so that they are not): ``rounds`` of take(``queues``) with window 1
    (a head of each sub-queue) and the ack of it, the first round (the ingest)
    the warm-up run."""
    for order, label in (("n % {q}", "round robin"), ("n div {r}", "put together")):
        tube = sq.create_tube(f"utube_{len(profile.runs)}", "utubettl")
        profile.tube = tube
        rows = profile.spark.range(queues * (rounds + 1)).toDF("n")
        queue = F.expr(order.format(q=queues, r=rounds + 1)).cast("string")
        tube.put(rows.withColumn("q", queue), utube=F.col("q"))
        for _ in range(rounds + 1):
            taken = profile.run(f"take({queues}), window 1, sub-queues {label}",
                                functools.partial(tube.take, queues, window=1))
            profile.run(f"ack({queues}), sub-queues {label}", functools.partial(tube.ack, taken))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--engine", default=None, choices=("portable", "accelerated"))
    parser.add_argument("--drain-rows", type=int, default=1_000_000)
    parser.add_argument("--drain-batch", type=int, default=100_000)
    parser.add_argument("--sub-queues", type=int, default=16)
    args = parser.parse_args(argv)
    spark = sparkqueue.session(app_name="sparkqueue-profile", master="local[2]")
    root = tempfile.mkdtemp(prefix="sparkqueue-profile-")
    sq = sparkqueue.connect(spark, root, owner="profile", engine=args.engine)
    tube = sq.create_tube("p", "fifottl")
    profile = Profile(spark, tube)
    profile.run("put (tasks)", lambda: tube.put(spark.range(args.tasks).toDF("n")))
    profile.run("take(1) with the ingest", lambda: tube.take(1))
    tube.release_all()
    for _ in range(args.repeat + 1):
        one_round(profile, tube)
    if args.drain_batch:
        drain(profile, sq, args.drain_rows, args.drain_batch)
    if args.sub_queues:
        sub_queues(profile, sq, args.sub_queues, args.repeat + 1)
    print(f"engine: {sq.engine}; a fifottl tube of {args.tasks} tasks; medians of "
          f"{args.repeat} runs after a warm-up run; the drain of {args.drain_rows} new "
          f"tasks in batches of {args.drain_batch}: its first batch, then the medians of "
          "the others after a warm-up batch; sub-queues: medians after a warm-up run\n")
    print(profile.report())
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
