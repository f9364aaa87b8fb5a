"""One of two Spark applications that put into and drain one tube on S3 through an S3
that misbehaves (tests/objectstore/faulty.py), for tests/objectstore/test_faults.py.

    python drain_app.py ROOT ENGINE WHO BATCHES SIZE first|second OUT

ENGINE: ``accelerated`` or ``portable`` (an application of its own), or a Spark
Connect server's URL (``sc://...``: a client of that server, whose session
reaches S3).

It opens the root and the tube (the first application creates it), then puts
``BATCHES`` batches of ``SIZE`` tasks, taking and acking a batch after each
put, then takes and acks until the tube is empty. Every verb is called as
a user would: an error is recorded by type and the verb tried again, except a
put, which is never repeated (a put that raised may have landed: its rows must
then show once, whole, or not at all). A take that raised may have leased tasks
to this owner unseen: they come back by ``release_all`` when no task is left to
take. Then the first application calls each other verb once on a tube of its own
(``every_verb``); the second does not: the first application of another test
calls them on its engine.
It prints ``batch N`` as it goes, and writes what it saw to OUT as JSON.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

from pyspark.sql import SparkSession

import sparkqueue
from sparkqueue import QueueError, TaskNotFound
from sparkqueue.store.failures import storage_failure
from tests.conftest import one_start_at_a_time
from tests.objectstore.s3_app import GO, SMALL

#: S3A gives up on a request after a few seconds of faults, so that an outage
#: reaches the caller as errors rather than as one long wait
FEW_RETRIES = {"spark.hadoop.fs.s3a.retry.limit": "3",
               "spark.hadoop.fs.s3a.retry.interval": "250ms",
               "spark.hadoop.fs.s3a.retry.throttle.limit": "5",
               "spark.hadoop.fs.s3a.retry.throttle.interval": "100ms",
               "spark.hadoop.fs.s3a.attempts.maximum": "2",
               "spark.hadoop.fs.s3a.connection.establish.timeout": "2s"}
R = TypeVar("R")
#: Spark's error class for a data file it could not read (its cause may not be in
#: the message a Spark Connect client gets)
READ_FAILED = "FAILED_READ_FILE"


class Drain:
    """One application's verbs on the tube, and what it saw of them."""

    def __init__(self, who: str, deadline: float, remote: bool = False) -> None:
        self.who, self.deadline = who, deadline
        self.remote = remote  # a Spark Connect client
        self.tube: sparkqueue.Tube  # the tube drained, once the application found it
        self.errors: Counter[str] = Counter()
        self.messages: dict[str, str] = {}  # the first message of each kind of error
        self.untyped: list[str] = []
        self.taken: list[list[Any]] = []  # [task_id, who put it, batch, i]
        self.put: list[int] = []
        self.uncertain: list[int] = []  # batches whose put raised
        self.called: list[str] = []  # the verbs every_verb called

    def call(self, verb: str, fn: Callable[[], R]) -> R | QueueError:
        """``fn()``, or the typed error it raised (counted); an untyped one is kept."""
        try:
            return fn()
        except QueueError as e:
            self.errors[f"{verb}:{type(e).__name__}"] += 1
            self.messages.setdefault(f"{verb}:{type(e).__name__}", str(e)[:500])
            return e
        except Exception as e:  # noqa: BLE001 (what the test asserts never happens)
            where = " < ".join(f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno}"
                               for f in reversed(traceback.extract_tb(e.__traceback__)[-6:]))
            self.untyped.append(f"{verb}: {type(e).__name__} at {where}: {str(e)[:300]}")
            return QueueError(str(e))

    def read(self, what: str, fn: Callable[[], R]) -> R | None:
        """``fn()``: an action on a DataFrame a verb returned, which reads the tube's
        files when it runs, outside the verb. A storage failure then is Spark's own
        error, not a verb's: it is counted as ``what:read`` (None returned), or as
        ``what:read-unrecognised`` where a Spark Connect client's message does
        not show the storage's cause; any other error is kept as untyped."""
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 (Spark's own error: counted, or kept)
            shown = storage_failure(e) is not None or READ_FAILED in str(e)
            # a Spark Connect client's message may not hold the storage's cause
            if not shown and not (self.remote and type(e).__module__.startswith("pyspark")):
                self.untyped.append(f"{what}:read: {type(e).__name__}: {str(e)[:300]}")
                return None
            kind = "read" if shown else "read-unrecognised"
            self.errors[f"{what}:{kind}"] += 1
            self.messages.setdefault(f"{what}:{kind}", str(e)[:500])
            return None

    def until_done(self, verb: str, fn: Callable[[], R]) -> R:
        """``fn()`` tried until it does not raise (each error counted; S3A's retries
        pace the tries while S3 is down)."""
        while time.monotonic() < self.deadline:
            got = self.call(verb, fn)
            if not isinstance(got, QueueError):
                return got
        raise TimeoutError(f"{self.who}: {verb} kept failing")

    def put_batch(self, batch: int, size: int) -> None:
        rows = [{"who": self.who, "b": batch, "i": i} for i in range(size)]
        got = self.call("put", lambda: self.tube.put(rows))
        (self.uncertain if isinstance(got, QueueError) else self.put).append(batch)

    def take_rows(self, tube: sparkqueue.Tube, n: int, wait: float = 0.0) -> list[Any] | None:
        """The rows of one take of ``n`` from ``tube`` (waiting up to ``wait`` seconds);
        None when the take raised or its rows could not be read (it may then have
        leased tasks to this owner unseen)."""
        batch = self.call("take", lambda: tube.take(n, timeout=wait))
        return None if isinstance(batch, QueueError) else self.read("take", batch.collect)

    def take_and_ack(self, n: int, wait: float = 0.0) -> int:
        """One take (waiting up to ``wait`` seconds for a task) and the ack of what it
        gave: how many it gave (-1: it raised, or its rows could not be read)."""
        got = self.take_rows(self.tube, n, wait)
        if got is None:  # leased to this owner unseen, maybe: see drain()
            return -1
        ids = [int(r["task_id"]) for r in got]
        self.taken.extend([int(r["task_id"]), r["data"]["who"], r["data"]["b"], r["data"]["i"]]
                          for r in got)
        while ids and time.monotonic() < self.deadline:
            acked = self.call("ack", lambda: self.tube.ack(ids))
            if not isinstance(acked, QueueError):
                break
            if isinstance(acked, TaskNotFound):  # an ack whose answer was lost landed
                break
        return len(got)

    def drain(self, n: int) -> None:
        """Take and ack until the tube holds no task (this owner's unseen leases given
        back when nothing is left to take; the other application's awaited)."""
        while time.monotonic() < self.deadline:
            if self.take_and_ack(n, wait=1.0) != 0:
                continue
            stats = self.call("statistics", lambda: self.tube.statistics()["tasks"])
            if isinstance(stats, QueueError):
                continue
            if stats["total"] == 0:
                return
            taken = self.call("tasks_by_state", lambda: self.tube.tasks_by_state("taken"))
            if isinstance(taken, QueueError):
                continue
            mine = self.read("tasks_by_state", taken.where(f"owner = '{self.who}'").count)
            if mine:
                self.until_done("release_all", self.tube.release_all)
        raise TimeoutError(f"{self.who}: the tube did not empty")

    def leased(self, tube: sparkqueue.Tube) -> list[int]:
        """The ids of tasks taken from ``tube`` (this application's own), tried until a
        take gives some and its rows are read. Leases a failed try may have made
        unseen come back by ``release_all``; a put that did not land is made again
        (what this tube holds is not checked)."""
        while time.monotonic() < self.deadline:
            got = self.take_rows(tube, 4)
            if got:
                return [int(r["task_id"]) for r in got]
            self.call("release_all", tube.release_all)
            stats = self.call("statistics", lambda: tube.statistics()["tasks"])
            if not isinstance(stats, QueueError) and stats["total"] == 0:
                self.call("put", lambda: tube.put([{"i": i} for i in range(4)]))
        return []

    def every_verb(self, sq: sparkqueue.Queue) -> None:
        """The other verbs, each called once through the faults on a tube of this
        application's own: touch, release, bury, kick, peek, delete, and a sweeper
        pass (expiry, purge, compaction and VACUUM all due). Each returns or raises
        a typed error; what it did is not checked here (a lost answer may have
        landed), only that nothing untyped reaches the caller."""
        tube = self.until_done("create_tube", lambda: sq.create_tube(
            f"verbs_{self.who}", "fifottl", ttr=3600, if_not_exists=True))
        self.call("put", lambda: tube.put([{"i": i} for i in range(4)]))
        ids = self.leased(tube)
        steps: list[tuple[str, Callable[[], object]]] = [
            ("touch", lambda: tube.touch(ids, 60.0)),
            ("release", lambda: tube.release(ids[:1])),
            ("bury", lambda: tube.bury(ids[1:2])),
            ("kick", lambda: tube.kick(1)),
            ("peek", lambda: tube.peek(ids)),
            ("delete", lambda: tube.delete(ids[2:]))] if ids else []
        for verb, fn in [*steps, ("sweep", lambda: sq.sweep(tube.name))]:
            self.call(verb, fn)
            self.called.append(verb)


def main(argv: list[str]) -> int:
    root, engine, who, batches, size, order, out = argv
    if engine.startswith("sc://"):  # a Spark Connect client of the server there
        spark: SparkSession | None = SparkSession.builder.remote(engine).getOrCreate()
    else:
        with one_start_at_a_time():  # Ivy resolves S3A's and Delta's packages
            sparkqueue.session(master="local[1]", conf={**SMALL, **FEW_RETRIES}, root=root)
        spark = None
    started = time.monotonic()
    drain = Drain(who, started + 600, remote=spark is not None)
    sq: sparkqueue.Queue | None = None
    try:  # the Queue and the tube through the faults too: each call tried until it works
        sq = drain.until_done("connect", lambda: sparkqueue.connect(
            spark, root, owner=who, engine=None if spark is not None else engine))
        if order == "first":
            drain.until_done("create_tube", lambda: sq.create_tube(
                "jobs", "fifottl", ttr=3600, if_not_exists=True))
            print(GO, flush=True)
        else:
            assert sys.stdin.readline().strip() == GO
        drain.tube = drain.until_done("tube", lambda: sq.tube("jobs"))
        for batch in range(int(batches)):
            drain.put_batch(batch, int(size))
            drain.take_and_ack(int(size))
            print(f"batch {batch}", flush=True)
        drain.drain(int(size))
        if order == "first":
            drain.every_verb(sq)
    finally:  # what it saw, also when the drain did not finish (printed for the test)
        seen = {"engine": sq.engine if sq is not None else None, "errors": drain.errors,
                "messages": drain.messages, "untyped": drain.untyped, "called": drain.called,
                "taken": drain.taken, "put": drain.put, "uncertain": drain.uncertain,
                "seconds": time.monotonic() - started}
        print(json.dumps({k: v for k, v in seen.items() if k != "taken"}), flush=True)
        with open(out, "w") as f:
            json.dump(seen, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
