"""Concurrency: no task is delivered twice or lost; producers do not starve consumers."""

from __future__ import annotations

import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import sparkqueue
from sparkqueue import Queue, Tube
from tests.conftest import commit_infos, ids

from ..jvm import short_lived

HERE = Path(__file__).parent


class OtherApp:
    """A second Spark application (taker.py) that takes from tubes when told to."""

    def __init__(self) -> None:
        env = short_lived(PYTHONPATH=str(HERE.parent.parent))
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "taker.py")], env=env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.seen: list[str] = []
        self.wait_for("ready")  # Spark's start-up chatter comes first

    def wait_for(self, word: str) -> str:
        """Read its output up to a line starting with ``word``; that line."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.seen.append(line)
            if line.startswith(word):
                return line.strip()
        raise AssertionError(f"the second application ended before {word!r}:\n"
                             + "".join(self.seen[-50:]))

    def start(self, root: str, tube: str, batch: int, out: Path, *flags: str) -> None:
        """Tell it to take from ``tube`` into ``out``; returns once it has taken."""
        assert self.proc.stdin is not None
        out.touch()
        self.proc.stdin.write(shlex.join([root, tube, str(batch), str(out), *flags]) + "\n")
        self.proc.stdin.flush()
        self.wait_for("taking")

    def finish(self, out: Path) -> list[int]:
        """Wait for the command to end; the ids it took."""
        self.wait_for("took")
        return [int(line) for line in out.read_text().split()]

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=120)


@pytest.fixture(scope="module")
def other_app() -> Iterator[OtherApp]:
    """One second Spark application for this module's tests (a JVM start-up saved)."""
    app = OtherApp()
    yield app
    app.close()


def sub_queue_history(spark: SparkSession, t: Tube) -> tuple[int, dict[str, list[int]]]:
    """Replay the tasks table's change feed, commit by commit.

    Returns the most tasks of one sub-queue ever taken at once (after any
    commit), and each sub-queue's task ids in the order they were first taken.
    """
    path = t.context.layout.tasks(t.name)
    changes = (spark.read.format("delta").option("readChangeFeed", "true")
               .option("startingVersion", 0).load(path)
               .where("task_id >= 0 AND _change_type IN ('insert', 'update_postimage', 'delete')")
               .select("_commit_version", "_change_type", "task_id", "status", "utube")
               .orderBy("_commit_version").collect())
    state: dict[int, tuple[str, str]] = {}
    first_taken: dict[str, list[int]] = {}
    most = 0
    for version in sorted({r["_commit_version"] for r in changes}):
        for r in (r for r in changes if r["_commit_version"] == version):
            if r["_change_type"] == "delete":
                state.pop(r["task_id"], None)
                continue
            if r["status"] == "taken" and r["task_id"] not in sum(first_taken.values(), []):
                first_taken.setdefault(r["utube"], []).append(r["task_id"])
            state[r["task_id"]] = (r["status"], r["utube"])
        held: dict[str, int] = {}
        for status, utube in state.values():
            if status == "taken":
                held[utube] = held.get(utube, 0) + 1
        most = max([most, *held.values()])
    return most, first_taken


def take_and_ack(tube: Tube, batch: int, owner: str, into: list[int]) -> None:
    """Take and ack until the tube holds no task (empty takes: sub-queues busy elsewhere)."""
    deadline = time.monotonic() + 600
    while tube.statistics()["tasks"]["total"] > 0 and time.monotonic() < deadline:
        got = tube.take(batch, owner=owner)
        taken = ids(got)
        if taken:
            into.extend(taken)
            tube.ack(taken, owner=owner)


def in_threads(count: int, work: Callable[[str, list[int]], None]) -> dict[str, list[int]]:
    """Run ``work(name, into)`` in ``count`` threads at once; what each put in ``into``.
    A thread that raised fails the test with its error (a dead consumer's tasks
    would otherwise look merely slow)."""
    results: dict[str, list[int]] = {f"w{i}": [] for i in range(count)}
    errors: list[BaseException] = []

    def run(name: str, got: list[int]) -> None:
        try:
            work(name, got)
        except BaseException as e:  # noqa: BLE001 - raised below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(name, got)) for name, got in results.items()]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
    return results


def drain(tube: sparkqueue.Tube, batch: int, into: list[int], owner: str) -> None:
    empty = 0
    while empty < 2:
        got = ids(tube.take(batch, owner=owner))
        empty = 0 if got else empty + 1
        into.extend(got)


@pytest.mark.parametrize("engine", ["accelerated", "portable"])
def test_threads_taking_from_one_tube_never_share_a_task(sq: Queue, engine: str) -> None:
    """Takes of new puts among them: the portable engine's append of them reads no
    row, and each commits once (the ingest's transaction id)."""
    if engine == "portable":
        sq = sparkqueue.connect(sq.spark, sq.root, owner=sq.owner, clock=sq.clock,
                                engine="portable")
    tube = sq.create_tube("c", "fifottl")
    created = ids(tube.put([{"n": i} for i in range(24)]))
    results = in_threads(3, lambda name, got: drain(tube, 4, got, name))
    everything = [i for got in results.values() for i in got]
    assert sorted(everything) == created  # each task exactly once, none lost
    plans = [info["tag"].get("plan") for info in commit_infos(tube).values()
             if info["tag"].get("sq") == "ingest+take"]
    assert plans and set(plans) == {"new-puts"}, "the first takes raced to lease new puts"
    owners = {r["task_id"]: r["owner"] for r in tube.tasks_by_state("taken").collect()}
    for name, got in results.items():
        assert all(owners[i] == name for i in got)


def test_first_puts_at_once_on_a_new_tube_all_land(spark: SparkSession, root: str,
                                                     sq: Queue) -> None:
    """Two workers starting on new tubes put at once: each first put sets the tube's
    payload schema, and Delta refuses the commit that comes second (its metadata
    changed); that put is made again with the schema, and lands."""
    other = sparkqueue.connect(spark, root, owner="other")
    names = [f"new{i}" for i in range(3)]
    for name in names:
        sq.create_tube(name, "fifo")
    queues = {"w0": sq, "w1": other}

    def first_puts(worker: str, got: list[int]) -> None:
        for name in names:
            got.extend(ids(queues[worker].tube(name).put([{"n": int(worker[1:])}])))

    results = in_threads(2, first_puts)
    assert all(len(got) == len(names) for got in results.values())
    for name in names:
        assert sorted(r["data"]["n"] for r in sq.tube(name).peek(
            [i for got in results.values() for i in got]).collect()) == [0, 1]


def test_a_steady_producer_does_not_starve_a_consumer(sq: Queue) -> None:
    tube = sq.create_tube("p", "fifo")
    tube.put([{"n": -1}])
    stop = threading.Event()
    produced: list[int] = []

    def produce() -> None:
        n = 0
        while not stop.is_set():
            produced.extend(ids(tube.put([{"n": n + i} for i in range(5)])))
            n += 5

    producer = threading.Thread(target=produce)
    producer.start()
    consumed: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while len(consumed) < 15 and time.monotonic() < deadline:
            batch = tube.take(10, timeout=5)
            consumed.extend(ids(batch))
            if batch.count():
                tube.ack(batch)
        while_running = len(consumed)
    finally:
        stop.set()
        producer.join()
    assert while_running >= 15, "the consumer starved beside the producer"
    assert len(set(consumed)) == len(consumed)


@pytest.mark.slow
def test_two_spark_applications_never_get_the_same_task(
        sq: Queue, root: str, tmp_path: Path, other_app: OtherApp) -> None:
    tube = sq.create_tube("x", "fifottl")
    created = ids(tube.put([{"n": i} for i in range(24)]))
    out = tmp_path / "other.txt"
    other_app.start(root, "x", 3, out)  # we start once it is taking too
    mine: list[int] = []
    drain(tube, 3, mine, "this-process")
    theirs = other_app.finish(out)
    assert theirs, "the second application took nothing: the test proved nothing"
    assert not set(mine) & set(theirs)
    assert sorted(mine + theirs) == created


def put_sub_queues(tube: Tube, queues: int, each: int) -> dict[str, list[int]]:
    """``each`` tasks in each of ``queues`` sub-queues, put interleaved; ids per sub-queue."""
    rows = [{"q": f"q{q}", "i": i} for i in range(each) for q in range(queues)]
    frame = tube.context.spark.createDataFrame(rows, "q string, i long")
    created = tube.put(frame, utube=F.col("q"))
    by_queue: dict[str, list[int]] = {}
    for r in created.orderBy("task_id").collect():
        by_queue.setdefault(r["utube"], []).append(r["task_id"])
    return by_queue


def test_threads_never_hold_one_sub_queue_twice_and_keep_its_order(
        sq: Queue, spark: SparkSession) -> None:
    tube = sq.create_tube("u", "utube", change_feed=True)
    expected = put_sub_queues(tube, queues=3, each=2)
    done = in_threads(3, lambda name, got: take_and_ack(tube, 2, name, got))
    everything = sorted(i for got in done.values() for i in got)
    assert everything == sorted(i for q in expected.values() for i in q)  # once each
    most, order = sub_queue_history(spark, tube)
    assert most == 1  # never two tasks of one sub-queue taken at once
    assert order == expected  # each sub-queue completed in order


@pytest.mark.slow
def test_two_spark_applications_never_hold_one_sub_queue_twice(
        sq: Queue, spark: SparkSession, root: str, tmp_path: Path, other_app: OtherApp) -> None:
    tube = sq.create_tube("v", "utubettl", change_feed=True)
    expected = put_sub_queues(tube, queues=3, each=3)
    out = tmp_path / "other.txt"
    other_app.start(root, "v", 2, out, "--ack")
    mine: list[int] = []
    take_and_ack(tube, 2, "this-process", mine)
    theirs = other_app.finish(out)
    assert theirs and mine, "one application took nothing: the test proved nothing"
    assert sorted(mine + theirs) == sorted(i for q in expected.values() for i in q)
    most, order = sub_queue_history(spark, tube)
    assert most == 1
    assert order == expected
