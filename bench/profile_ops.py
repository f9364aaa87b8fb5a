"""Where a verb's time goes, on each engine: round trips, Spark work and commits.

For the accelerated engine and the portable one in a classic session, and the
portable one as a Spark Connect client of a local server (each in a process
of its own): a fifottl tube of --tasks tasks, each verb run --repeat times
after a warm-up run; then a drain of --drain-rows new puts, take and ack in
batches of --drain-batch, and a Consumer's drain of as many; then take with
window 1 over a utubettl tube of --sub-queues sub-queues, and its ack.

Per verb: the median wall seconds, and of the run with the median count of
Spark tasks: the SQL executions (each action the driver ran), the Spark jobs,
their stages and tasks (from Spark's monitoring REST API, which a Spark
Connect server serves as well), the commits to the tube's tables (files
added to their Delta logs), and for a Spark Connect client its RPCs to the
server (counted by a gRPC interceptor on the client's channel). The counts
are what the code does, the same on any host; the seconds are this host's.

    python -m bench.profile_ops [--engines accelerated,portable,connect] [--jobs] [--json F]
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import grpc

import sparkqueue
from sparkqueue.server import ConnectServer, free_port

from .engines import payload

REPO = Path(__file__).resolve().parent.parent
ENGINES = ("accelerated", "portable", "connect")
#: what each Spark UI keeps: enough for every job of the run
RETAINED = {"spark.ui.retainedJobs": "100000", "spark.ui.retainedStages": "100000",
            "spark.sql.ui.retainedExecutions": "100000", "spark.ui.enabled": "true"}


class Work(NamedTuple):
    """What the driver ran: SQL executions, Spark jobs, completed stages, their tasks."""

    executions: int
    jobs: int
    stages: int
    tasks: int


class SparkUi:
    """Spark's monitoring REST API at ``url``: counts of what the driver ran."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/") + "/api/v1/applications"
        self.app = self.get("")[0]["id"]

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(f"{self.url}{path}", timeout=30) as answer:
            return json.load(answer)

    def work(self) -> tuple[Work, dict[int, str]]:
        """Everything run so far, once the status store has taken every event in
        (events reach it a little after the actions return), and what each job
        was for (its description: Delta names its own jobs, for example "Compute
        snapshot for version: N" for a rebuild of a table's state)."""
        last: Work | None = None
        while True:
            jobs = self.get(f"/{self.app}/jobs")
            stages = self.get(f"/{self.app}/stages?status=complete")
            now = Work(len(self.get(f"/{self.app}/sql?details=false&length=1000000")),
                       len(jobs), len(stages), sum(s["numCompleteTasks"] for s in stages))
            if now == last and all(j["status"] != "RUNNING" for j in jobs):
                return now, {j["jobId"]: job_purpose(j) for j in jobs}
            last = now
            time.sleep(0.2)


def job_purpose(job: dict[str, Any]) -> str:
    """What a job was for: its description, else its name, first line; a Spark
    Connect server names its jobs by the session alone."""
    text = str(job.get("description") or job.get("name") or "").splitlines()[0]
    return "a Spark Connect execution" if text.startswith("Spark Connect") else text


class RpcCounter(grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
                 grpc.UnaryStreamClientInterceptor):  # type: ignore[misc]
    """A gRPC interceptor counting a Spark Connect client's calls to the server, by
    method (``ExecutePlan``, ``AnalyzePlan``, ``Config``, ...)."""

    def __init__(self) -> None:
        self.calls: collections.Counter[str] = collections.Counter()

    def _counted(self, call: Callable[..., Any], details: Any, request: Any) -> Any:
        self.calls[str(details.method).rsplit("/", 1)[-1]] += 1
        return call(details, request)

    intercept_unary_unary = intercept_unary_stream = _counted


def remote_session(url: str, counter: RpcCounter) -> Any:
    """A Spark Connect session whose channel has ``counter`` count its calls."""
    from pyspark.sql.connect.client import DefaultChannelBuilder
    from pyspark.sql.connect.session import SparkSession

    channel = DefaultChannelBuilder(url)
    channel.add_interceptor(counter)
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"  # what builder.remote() sets: the
    # functions module builds Connect Columns
    return SparkSession.builder.channelBuilder(channel).getOrCreate()


def commits(root: str) -> int:
    """Commit files in the Delta logs of every tube's tables under ``root``."""
    return sum(1 for _ in Path(root, "tubes").glob("*/*/_delta_log/*.json"))


class Profile:
    """Runs verbs and keeps what each cost."""

    def __init__(self, ui: SparkUi, root: str, rpcs: RpcCounter) -> None:
        self.ui, self.root, self.rpcs = ui, root, rpcs
        self.runs: dict[str, list[dict[str, Any]]] = {}

    def run(self, verb: str, fn: Callable[[], Any]) -> Any:
        (before, seen), made = self.ui.work(), commits(self.root)
        rpcs = self.rpcs.calls.copy()
        start = time.perf_counter()
        result = fn()
        took = time.perf_counter() - start
        after, jobs = self.ui.work()
        self.runs.setdefault(verb, []).append({
            "s": took, "commits": commits(self.root) - made,
            "rpcs": (self.rpcs.calls - rpcs).total(),
            "rpc_methods": dict(self.rpcs.calls - rpcs),
            **{k: getattr(after, k) - getattr(before, k) for k in Work._fields},
            "jobs_for": [jobs[j] for j in sorted(set(jobs) - set(seen))]})
        return result

    def medians(self) -> dict[str, dict[str, Any]]:
        """Per verb: the median seconds, and the counts of the run with the median
        count of tasks (the warm-up run left out where there are others)."""
        out = {}
        for verb, runs in self.runs.items():
            timed = runs[1:] or runs
            mid = sorted(timed, key=lambda r: r["tasks"])[(len(timed) - 1) // 2]
            out[verb] = {**mid, "s": statistics.median(r["s"] for r in timed)}
        return out


def one_round(profile: Profile, tube: sparkqueue.Tube) -> None:
    """Each verb once, on tasks of the tube's head."""
    profile.run("put(1)", lambda: tube.put({"n": -1}))
    profile.run("take(1) of a put(1)", lambda: tube.take(1))
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


def drains(profile: Profile, sq: sparkqueue.Queue, spark: Any, rows: int, batch: int) -> None:
    """``rows`` new puts taken and acked in batches of ``batch`` (the first batch the
    warm-up), then as many by a Consumer (each round a take carrying the last
    batch's acks), its whole run."""
    tube = sq.create_tube("drain", "fifottl")
    tube.put(payload(spark, rows))
    size = f"{batch:,}"
    for _ in range(rows // batch):
        taken = profile.run(f"take({size}) of new puts", lambda: tube.take(batch))
        profile.run(f"ack({size}) of a take", functools.partial(tube.ack, taken))
    tube = sq.create_tube("consumed", "fifottl")
    tube.put(payload(spark, rows))
    consumer = sparkqueue.Consumer(tube, lambda got: None, batch_size=batch, take_timeout=0,
                                   idle_timeout=0)
    profile.run(f"a Consumer's drain of {rows:,}, batches of {size}", consumer.run)


def sub_queues(profile: Profile, sq: sparkqueue.Queue, spark: Any, queues: int,
               rounds: int) -> None:
    """take(``queues``) with window 1 over ``queues`` sub-queues and its ack, ``rounds``
    times after a warm-up round (the ingest)."""
    from pyspark.sql import functions as F

    tube = sq.create_tube("utube", "utubettl")
    rows = spark.range(queues * (rounds + 1)).toDF("n")
    tube.put(rows.withColumn("q", (F.col("n") % queues).cast("string")), utube=F.col("q"))
    for _ in range(rounds + 1):
        taken = profile.run(f"take({queues:,}), window 1, {queues:,} sub-queues",
                            lambda: tube.take(queues, window=1))
        profile.run(f"ack({queues:,}) of sub-queue heads", functools.partial(tube.ack, taken))


def profile_engine(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Every verb on this process's engine (a client of ``SPARK_REMOTE`` when set)."""
    remote = os.environ.get("SPARK_REMOTE")
    rpcs = RpcCounter()  # counts nothing in a classic session
    if remote:
        spark = remote_session(remote, rpcs)
    else:
        ui_port = free_port()
        spark = sparkqueue.session(app_name="sparkqueue-profile", master="local[2]",
                                   conf={**RETAINED, "spark.ui.port": str(ui_port)})
    ui = SparkUi(args.ui or spark.sparkContext.uiWebUrl)
    sq = sparkqueue.connect(spark, args.root, owner="profile",
                            engine=None if remote else args.engine)
    profile = Profile(ui, args.root, rpcs)
    tube = sq.create_tube("p", "fifottl")
    profile.run("put of the tasks", lambda: tube.put(payload(spark, args.tasks)))
    profile.run("take(1) with their ingest", lambda: tube.take(1))
    tube.release_all()
    for _ in range(args.repeat + 1):
        one_round(profile, tube)
    if args.drain_batch:
        drains(profile, sq, spark, args.drain_rows, args.drain_batch)
    if args.sub_queues:
        sub_queues(profile, sq, spark, args.sub_queues, args.repeat)
    medians = profile.medians()
    spark.stop()
    return medians


def run_engine(engine: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """:func:`profile_engine` for ``engine`` in a new process; its figures."""
    out = work / f"{engine}.json"
    command = [sys.executable, "-m", "bench.profile_ops", "--engine-process", engine,
               "--root", str(work / engine), "--json", str(out),
               *(f"--{k.replace('_', '-')}={getattr(args, k)}" for k in
                 ("tasks", "repeat", "drain_rows", "drain_batch", "sub_queues"))]
    if engine != "connect":
        subprocess.run(command, cwd=REPO, check=True)
        return dict(json.loads(out.read_text()))
    ui_port = free_port()
    server = ConnectServer(conf={**RETAINED, "spark.ui.port": str(ui_port),
                                 "spark.driver.memory": "6g"}, log=work / "server.log")
    with server:
        subprocess.run([*command, f"--ui=http://127.0.0.1:{ui_port}"], cwd=REPO, check=True,
                       env={**os.environ, "SPARK_REMOTE": server.url})
    return dict(json.loads(out.read_text()))


def table(profiles: dict[str, dict[str, dict[str, Any]]]) -> str:
    """A Markdown table: per verb, each engine's seconds and what it ran."""
    engines = list(profiles)
    head = " | ".join(f"{e} s | {e}: executions, jobs, tasks, commits"
                      + (", RPCs" if e == "connect" else "") for e in engines)
    lines = [f"| verb | {head} |", "| --- |" + " ---: | --- |" * len(engines)]
    for verb in profiles[engines[0]]:
        cells = []
        for engine in engines:
            r = profiles[engine].get(verb)
            if r is None:
                cells += ["", ""]
                continue
            counts = [r["executions"], r["jobs"], r["tasks"], r["commits"]]
            counts += [r["rpcs"]] if engine == "connect" else []
            cells += [f"{r['s']:.2f}", ", ".join(f"{c:g}" for c in counts)]
        lines.append(f"| {verb} | {' | '.join(cells)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--drain-rows", type=int, default=300_000)
    parser.add_argument("--drain-batch", type=int, default=100_000)
    parser.add_argument("--sub-queues", type=int, default=1000)
    parser.add_argument("--json", default=None, help="also write the figures here")
    parser.add_argument("--jobs", action="store_true", help="also list what each job was for")
    parser.add_argument("--engine-process", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--root", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--ui", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.engine_process:  # one engine's process
        args.engine = "portable" if args.engine_process == "connect" else args.engine_process
        Path(args.json).write_text(json.dumps(profile_engine(args)))
        return 0
    work = Path(tempfile.mkdtemp(prefix="sparkqueue-profile-"))
    profiles = {e: run_engine(e, args, work) for e in args.engines.split(",")}
    print(f"a fifottl tube of {args.tasks:,} tasks, medians of {args.repeat} runs after a "
          f"warm-up run; drains of {args.drain_rows:,} new puts in batches of "
          f"{args.drain_batch:,}\n")
    print(table(profiles))
    if args.jobs:
        for engine, verbs in profiles.items():
            print(f"\n{engine}: what each verb's Spark jobs were for\n")
            for verb, run in verbs.items():
                methods = ", ".join(f"{k} {v}" for k, v in sorted(run["rpc_methods"].items()))
                print(f"- {verb}: {'; '.join(run['jobs_for'])}"
                      + (f" (RPCs: {methods})" if methods else ""))
    if args.json:
        Path(args.json).write_text(json.dumps(profiles, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
