"""Concurrency: no task is delivered twice or lost; producers do not starve consumers."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from pyspark.sql import SparkSession

import sparkqueue
from sparkqueue import Queue
from tests.conftest import ids

HERE = Path(__file__).parent


def drain(tube: sparkqueue.Tube, batch: int, into: list[int], owner: str) -> None:
    empty = 0
    while empty < 2:
        got = ids(tube.take(batch, owner=owner))
        empty = 0 if got else empty + 1
        into.extend(got)


def test_threads_taking_from_one_tube_never_share_a_task(sq: Queue) -> None:
    tube = sq.create_tube("c", "fifottl")
    created = ids(tube.put([{"n": i} for i in range(24)]))
    results: dict[str, list[int]] = {f"w{i}": [] for i in range(3)}
    threads = [threading.Thread(target=drain, args=(tube, 4, got, name))
               for name, got in results.items()]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    everything = [i for got in results.values() for i in got]
    assert sorted(everything) == created  # each task exactly once, none lost
    owners = {r["task_id"]: r["owner"] for r in tube.tasks_by_state("taken").collect()}
    for name, got in results.items():
        assert all(owners[i] == name for i in got)


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


def test_two_spark_applications_never_get_the_same_task(
        sq: Queue, spark: SparkSession, root: str, tmp_path: Path) -> None:
    tube = sq.create_tube("x", "fifottl")
    created = ids(tube.put([{"n": i} for i in range(40)]))
    out = tmp_path / "other.txt"
    out.touch()
    env = dict(os.environ, PYTHONPATH=str(HERE.parent.parent))
    other = subprocess.Popen(
        [sys.executable, str(HERE / "taker.py"), root, "x", "3", str(out)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # start taking once the other application is up and taking too
    assert other.stdout is not None
    seen = []
    for line in other.stdout:  # Spark's start-up chatter comes first
        seen.append(line)
        if line.strip() == "taking":
            break
    assert seen and seen[-1].strip() == "taking", "".join(seen)
    mine: list[int] = []
    drain(tube, 3, mine, "this-process")
    output, _ = other.communicate(timeout=600)
    assert other.returncode == 0, output
    theirs = [int(line) for line in out.read_text().split()]
    assert theirs, "the second application took nothing: the test proved nothing"
    assert not set(mine) & set(theirs)
    assert sorted(mine + theirs) == created
