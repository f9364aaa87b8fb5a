"""Where an operation's time goes: Spark jobs, Delta commits and wall time per verb.

On a local Spark (classic: it reads Spark's job store through the JVM), a
fifottl tube of --tasks tasks, each verb run --repeat times after a warm-up
run; per verb the median wall time and, of its run with the median job count,
the Spark jobs it ran, the commits it made to the tube's inbox and tasks
tables, and what each job was for (its description: Delta names its own
jobs, for example "Compute snapshot for version: N" for a rebuild of a
table's state, "Filtering files for query" for data skipping). What docs/design.md's profile quotes.

    python jobs/profile_ops.py [--tasks 100000] [--repeat 5] [--engine portable]
"""

from __future__ import annotations

import argparse
import collections
import re
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from pyspark.sql import SparkSession

import sparkqueue


def job_descriptions(spark: SparkSession, group: str, verb: str) -> list[str]:
    """What each Spark job of job group ``group`` (described as ``verb``) was for, in
    the order they ran: Delta's name for its own jobs, else sparkqueue's."""
    store = spark._jsparkSession.sparkContext().statusStore()
    tracker = spark.sparkContext.statusTracker()
    out = []
    for job in sorted(tracker.getJobIdsForGroup(group)):
        text = re.sub(r"^Some\((.*)\)$", r"\1", str(store.job(job).description()))
        text = re.sub(r"^(Delta: )+", "", text).removeprefix(verb).lstrip(":- ")
        # a name Delta gives a stage of its command also carries the command's
        out.append(text.removeprefix("Delta: ") or "sparkqueue (a read, write or collect)")
    return out


class Profile:
    """Runs verbs in job groups of their own and keeps what each cost."""

    def __init__(self, spark: SparkSession, tube: sparkqueue.Tube) -> None:
        self.spark, self.tube = spark, tube
        self.runs: dict[str, list[tuple[float, list[str], int]]] = collections.defaultdict(list)

    def commits(self) -> int:
        layout = self.tube.context.layout
        name = self.tube.name
        return layout.latest_version(layout.inbox(name)) + layout.latest_version(
            layout.tasks(name))

    def run(self, verb: str, fn: Callable[[], Any]) -> Any:
        group = f"{verb}-{time.monotonic_ns()}"
        self.spark.sparkContext.setJobGroup(group, verb)
        before = self.commits()
        start = time.perf_counter()
        result = fn()
        took = time.perf_counter() - start
        self.runs[verb].append((took, job_descriptions(self.spark, group, verb),
                                self.commits() - before))
        self.spark.sparkContext.setJobGroup("", "")
        return result

    def report(self) -> str:
        """A Markdown table: per verb, median seconds, then the jobs, commits and jobs'
        purposes of its run with the median job count (the warm-up run left out):
        the run that writes a Delta checkpoint, one commit in ten, has more jobs
        than the others, and a verb's last run may be that one."""
        lines = ["| verb | median s | Spark jobs | commits | jobs, in order |",
                 "| --- | ---: | ---: | ---: | --- |"]
        for verb, runs in self.runs.items():
            timed = runs[1:] or runs
            _, jobs, commits = sorted(timed, key=lambda r: len(r[1]))[(len(timed) - 1) // 2]
            lines.append(f"| {verb} | {statistics.median(r[0] for r in timed):.2f} | "
                         f"{len(jobs)} | {commits} | {'; '.join(jobs)} |")
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--engine", default=None, choices=("portable", "accelerated"))
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
    print(f"engine: {sq.engine}; a fifottl tube of {args.tasks} tasks; medians of "
          f"{args.repeat} runs after a warm-up run\n")
    print(profile.report())
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
