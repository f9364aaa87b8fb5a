"""Crash torture: producers and consumers in separate Spark applications, killed at
random moments, then a drain; nothing may be lost or acked twice.

    python tests/concurrency/torture.py [--seconds 120] [--kills 8] [--seed 1] [--root DIR]
                                        [--s3]
    make torture                        # ARGS="--s3 --seconds 600" etc.

One producer, two consumers (one on each engine) and a sweeper run as their
own Spark applications (this file with ``--role``). The producer puts
batches whose payload names it, logging each batch before the call and its
task ids after it. A consumer takes a batch (``fifottl`` with a short ttr, so
the leases of a killed one end), logs the ids, acks them and logs the ids
again. The sweeper runs pass after pass. For ``--seconds`` the coordinator
SIGKILLs a random one of them at a random moment (mid-put, mid-take, mid-ack
or mid-sweep: it reports what the victim was doing) and starts a new one in
its place. Then it stops the producer, drains the tube itself, and prints
what the logs and the tube say:

- tasks put (by the tasks table's change feed: the tube's own record, which
  also holds the puts cut short that committed all the same), of them those
  whose put returned; a payload put twice, a batch put in part;
- acked (deleted from the tube), acked twice (an id deleted twice, or whose
  ack returned twice), lost (a put that returned whose task was never
  acked), re-delivered (taken again after its consumer died);
- the tube's statistics against the change feed: calls.put, calls.ack and
  tasks.done against the tasks put and acked, tasks.total against 0.

Exit status 0 when nothing was lost or acked twice and the statistics agree.
With ``--s3`` the queue is on S3 (a local S3-compatible server started for the
run, sparkqueue.s3gateway), the logs on the local folder.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from pyspark.sql import functions as F

import sparkqueue
from sparkqueue.s3gateway import S3Gateway

TUBE = "torture"
TTR = 8.0  # seconds: a killed consumer's tasks come back this long after its take
BATCH = 200
SLOTS = ("producer", "consumer1", "consumer2", "sweeper")
#: the engine of each slot's application (others: the accelerated one)
ENGINES = {"consumer2": "portable"}


def log_line(log: Any, *words: object) -> None:
    log.write(" ".join(str(w) for w in words) + "\n")
    log.flush()


def produce(root: str, log: Any, incarnation: str) -> None:
    """Put batches until killed or told to stop (SIGTERM, honoured between puts)."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    spark = sparkqueue.session(app_name=f"torture-producer-{incarnation}", master="local[1]",
                               root=root)
    tube = sparkqueue.connect(spark, root).tube(TUBE)
    batch = 0
    while not stop.is_set():
        log_line(log, "putting", incarnation, batch)
        rows = [{"who": incarnation, "batch": batch, "i": i} for i in range(BATCH)]
        created = tube.put(rows)
        log_line(log, "put", *[r["task_id"] for r in created.select("task_id").collect()])
        batch += 1


def consume(root: str, log: Any, engine: str) -> None:
    """Take and ack batches until killed."""
    spark = sparkqueue.session(app_name="torture-consumer", master="local[1]", root=root)
    tube = sparkqueue.connect(spark, root, engine=engine).tube(TUBE)
    while True:
        log_line(log, "taking")
        batch = tube.take(BATCH, timeout=2.0)
        ids = [r["task_id"] for r in batch.select("task_id").collect()]
        if ids:
            log_line(log, "took", *ids)
            log_line(log, "acking")
            log_line(log, "acked", *[r["task_id"] for r in tube.ack(ids).collect()])


def sweep(root: str, log: Any) -> None:
    """Sweeper passes, one after another, until killed."""
    spark = sparkqueue.session(app_name="torture-sweeper", master="local[1]", root=root)
    sq = sparkqueue.connect(spark, root)
    while True:
        log_line(log, "sweeping")
        sq.sweep()
        log_line(log, "swept")


def read_logs(folder: Path) -> dict[str, list[list[str]]]:
    """Every log's lines as words, by kind of line (a line cut by a kill is dropped)."""
    out: dict[str, list[list[str]]] = {}
    for file in sorted(folder.glob("*.log")):
        text = file.read_text()
        lines = text.splitlines() if text.endswith("\n") else text.splitlines()[:-1]
        for line in lines:
            words = line.split()
            if words:
                out.setdefault(words[0], []).append(words[1:])
    return out


class Crew:
    """The running producer and consumers, each a Spark application of its own."""

    def __init__(self, root: str, logs: Path) -> None:
        self.root, self.logs, self.started = root, logs, 0
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, slot: str) -> None:
        self.started += 1
        role = slot.rstrip("0123456789")
        log = self.logs / f"{slot}-{self.started}.log"
        self.procs[slot] = subprocess.Popen(
            [sys.executable, __file__, "--role", role, "--root", self.root, "--log", str(log),
             "--incarnation", str(self.started), "--engine", ENGINES.get(slot, "accelerated")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def newest_log(self, slot: str) -> list[str]:
        logs = sorted(self.logs.glob(f"{slot}-*.log"), key=lambda p: int(p.stem.split("-")[1]))
        return logs[-1].read_text().splitlines() if logs else []

    def working(self) -> list[str]:
        """The slots whose process is past its start-up (it has logged)."""
        return [slot for slot in sorted(self.procs) if self.newest_log(slot)]

    def wait_until_working(self) -> None:
        while len(self.working()) < len(self.procs):
            threading.Event().wait(0.5)

    def doing(self, slot: str) -> str:
        """What the process in ``slot`` was last doing, from its newest log."""
        last = self.newest_log(slot)
        word = last[-1].split()[0] if last else ""
        return {"putting": "mid-put", "taking": "mid-take", "acking": "mid-ack",
                "took": "between take and ack", "put": "between puts",
                "acked": "between ack and take", "sweeping": "mid-sweep",
                "swept": "between sweeps"}.get(word, "starting up")


def torture(args: argparse.Namespace) -> int:
    root = args.root or tempfile.mkdtemp(prefix="sparkqueue-torture-")
    logs = Path(root) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    with contextlib.ExitStack() as stack:
        queue = f"{root}/queue"
        if args.s3:  # the crew inherits the gateway's AWS environment
            gateway = stack.enter_context(S3Gateway(Path(root) / "objects"))
            os.environ.update(gateway.env)
            queue = gateway.root("queue")
        return run_crew(args, rng, queue, logs)
    raise AssertionError("unreachable")


def run_crew(args: argparse.Namespace, rng: random.Random, queue: str, logs: Path) -> int:
    """Start the crew on ``queue``, kill at random, drain, report."""
    spark = sparkqueue.session(app_name="torture", master="local[1]", root=queue)
    sq = sparkqueue.connect(spark, queue, owner="drain")
    tube = sq.create_tube(TUBE, "fifottl", ttr=TTR, if_not_exists=True,
                          change_feed=True)  # its check reads the feed
    crew = Crew(queue, logs)
    for slot in SLOTS:
        crew.start(slot)
    kills: Counter[str] = Counter()
    crew.wait_until_working()
    end = time.monotonic() + args.seconds
    while time.monotonic() < end and sum(kills.values()) < args.kills:
        threading.Event().wait(rng.uniform(1.0, 2.0 * args.seconds / max(1, args.kills)))
        working = crew.working()
        if not working:
            continue
        slot = rng.choice(working)
        kills[f"{slot.rstrip('0123456789')} {crew.doing(slot)}"] += 1
        crew.procs[slot].send_signal(signal.SIGKILL)
        crew.procs[slot].wait()
        crew.start(slot)
    threading.Event().wait(max(0.0, end - time.monotonic()))
    crew.procs["producer"].send_signal(signal.SIGTERM)
    crew.procs["producer"].wait(timeout=300)
    for slot in ("consumer1", "consumer2", "sweeper"):
        crew.procs[slot].send_signal(signal.SIGKILL)
        crew.procs[slot].wait()
    drained = drain(tube, logs)
    return report(read_logs(logs), kills, tube, drained)


def drain(tube: sparkqueue.Tube, logs: Path) -> int:
    """Take and ack until the tube holds nothing (killed consumers' leases end first).

    A batch whose ack comes TTR seconds or more after its take (a machine
    busy with other work) finds its leases ended: the ack is refused, as
    it must be, and the tasks are taken again. Sooner, a refusal is a fault.
    """
    rounds = 0
    with open(logs / "drain-0.log", "a") as log:
        while tube.statistics()["tasks"]["total"] > 0:
            took = time.monotonic()
            batch = tube.take(10_000, timeout=TTR + 2.0)
            ids = [r["task_id"] for r in batch.select("task_id").collect()]
            if ids:
                log_line(log, "took", *ids)
                try:
                    acked = tube.ack(ids).collect()
                except sparkqueue.InvalidState:
                    if time.monotonic() - took < TTR:
                        raise
                    acked = []
                log_line(log, "acked", *[r["task_id"] for r in acked])
            rounds += 1
    return rounds


def feed(tube: sparkqueue.Tube, changes: str) -> Any:
    """The tasks table's change feed, its rows of ``changes`` (SQL of ``_change_type``)."""
    return (tube.context.spark.read.format("delta").option("readChangeFeed", "true")
            .option("startingVersion", 0).load(tube.context.layout.tasks(tube.name))
            .where(f"task_id >= 0 AND _change_type IN ({changes})"))


def feed_counts(tube: sparkqueue.Tube) -> tuple[Counter[int], Counter[int]]:
    """How often the tasks table's change feed inserted and deleted each task id:
    what the tube itself says happened, whatever a killed process did not log."""
    rows = feed(tube, "'insert', 'delete'").groupBy("task_id", "_change_type").count().collect()
    inserts = Counter({int(r["task_id"]): int(r["count"]) for r in rows
                       if r["_change_type"] == "insert"})
    deletes = Counter({int(r["task_id"]): int(r["count"]) for r in rows
                       if r["_change_type"] == "delete"})
    return inserts, deletes


def batch_sizes(tube: sparkqueue.Tube) -> tuple[int, list[int]]:
    """Payloads inserted more than once (a put landed twice), and the sizes of the
    batches inserted with fewer or more than BATCH tasks (a put in part)."""
    rows = feed(tube, "'insert'").groupBy("data.who", "data.batch").agg(
        F.count("*").alias("n"), F.countDistinct("data.i").alias("distinct")).collect()
    return (sum(int(r["n"]) - int(r["distinct"]) for r in rows),
            sorted(int(r["n"]) for r in rows if int(r["n"]) != BATCH))


def report(lines: dict[str, list[list[str]]], kills: Counter[str], tube: sparkqueue.Tube,
           drain_rounds: int) -> int:
    """Print the figures; 0 when nothing was lost or acked twice and the statistics agree."""
    stats = tube.statistics()
    inserts, deletes = feed_counts(tube)
    payloads_twice, partial = batch_sizes(tube)
    put = {int(i) for words in lines.get("put", []) for i in words}
    acks = Counter(int(i) for words in lines.get("acked", []) for i in words)
    takes = Counter(int(i) for words in lines.get("took", []) for i in words)
    lost = put - set(deletes)
    twice = sorted({i for i, n in acks.items() if n > 1} | {i for i, n in deletes.items()
                                                             if n > 1})
    checks = {
        "tasks were put and acked": bool(inserts) and bool(deletes),
        "lost": not lost,
        "acked twice": not twice,
        "put twice": all(n == 1 for n in inserts.values()) and payloads_twice == 0,
        "put in part": not partial,
        "acks logged are acks in the tube": set(acks) <= set(deletes),
        "calls.put = tasks put": stats["calls"]["put"] == len(inserts),
        "calls.ack = tasks acked": stats["calls"]["ack"] == len(deletes),
        "tasks.done = tasks acked": stats["tasks"]["done"] == len(deletes),
        "tasks.total = 0": stats["tasks"]["total"] == 0,
    }
    print("kills: " + str(sum(kills.values())) + " ("
          + ", ".join(f"{k}: {n}" for k, n in sorted(kills.items())) + ")")
    print(f"tasks put: {len(inserts)} ({len(put)} by puts that returned, "
          f"{len(set(inserts) - put)} by puts cut short that committed)")
    print(f"acked: {len(deletes)} ({len(acks)} by acks that returned); "
          f"acked twice: {len(twice)}; lost: {len(lost)}; "
          f"re-delivered: {sum(1 for n in takes.values() if n > 1)}; "
          f"drain rounds: {drain_rounds}")
    print(f"statistics: calls.put {stats['calls']['put']}, calls.take {stats['calls']['take']}, "
          f"calls.ack {stats['calls']['ack']}, tasks.done {stats['tasks']['done']}, "
          f"tasks.total {stats['tasks']['total']}")
    for name, ok in checks.items():
        print(f"{'ok  ' if ok else 'FAIL'} {name}")
    if lost:
        print("lost ids:", sorted(lost)[:20])
    if payloads_twice or partial:
        print(f"payloads put twice: {payloads_twice}; batches put in part (sizes): {partial}")
    return 0 if all(checks.values()) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0, help="how long to kill")
    parser.add_argument("--kills", type=int, default=8, help="at most this many kills")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--root", help="folder for the queue and logs (default: a new one)")
    parser.add_argument("--s3", action="store_true",
                        help="the queue on S3: a local S3-compatible server started for it")
    parser.add_argument("--role", choices=["producer", "consumer", "sweeper"],
                        help=argparse.SUPPRESS)
    parser.add_argument("--engine", default="accelerated", help=argparse.SUPPRESS)
    parser.add_argument("--log", help=argparse.SUPPRESS)
    parser.add_argument("--incarnation", default="0", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role is None:
        return torture(args)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    with open(args.log, "a") as log:
        if args.role == "producer":
            produce(args.root, log, args.incarnation)
        elif args.role == "consumer":
            consume(args.root, log, args.engine)
        else:
            sweep(args.root, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
