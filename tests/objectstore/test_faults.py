"""An S3 that misbehaves (tests/objectstore/faulty.py, a proxy in front of the local S3
server): 503 SlowDown, reset connections, writes applied whose answer is lost, and
the endpoint unreachable for a while. Two Spark applications, one on each engine,
put into one tube and drain it through them (tests/objectstore/drain_app.py); then
a Spark Connect client does the same through a server whose S3 misbehaves."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from sparkqueue.s3gateway import S3Gateway
from sparkqueue.server import ConnectServer

from ..conftest import one_start_at_a_time
from ..jvm import short_lived
from .drain_app import FEW_RETRIES
from .faulty import FaultyS3
from .s3_app import GO, SMALL

pytestmark = pytest.mark.slow

APP = Path(__file__).parent / "drain_app.py"
REPO = APP.parents[2]
#: 5% of requests answered 503 SlowDown, 2% reset, 10% of writes applied and unanswered,
#: and three in ten of the writes of Delta commit files (a few dozen in a run)
RATES = {"slowdown": 0.05, "reset": 0.02, "lost": 0.10, "lost_commit": 0.30}
OUTAGE = 20.0
BATCHES, SIZE = 3, 20


def start(env: dict[str, str], root: str, engine: str, who: str, order: str,
          out: Path, batches: int = BATCHES) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(APP), root, engine, who, str(batches), str(SIZE), order, str(out)],
        env=short_lived(PYTHONPATH=str(REPO), **env), text=True, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def follow(first: subprocess.Popen[str], second: subprocess.Popen[str] | None,
           proxy: FaultyS3, back: threading.Timer, lines: list[str]) -> None:
    """Read the first application's output: its go line passed to the second (if
    any); after its second batch, the endpoint goes down (``back`` brings it back)."""
    assert first.stdout is not None
    for line in first.stdout:
        lines.append(line)
        if line.strip() == GO and second is not None:
            assert second.stdin is not None
            second.stdin.write(line)
            second.stdin.flush()
        elif line.strip() == "batch 1":
            proxy.outage()
            back.start()


def test_two_applications_drain_one_tube_through_s3_faults_and_an_outage(
        gateway: S3Gateway, tmp_path: Path, record_property: Any) -> None:
    """An accelerated and a portable application each put 3 batches of 20 tasks and
    take and ack them, then drain the tube, through the faults of :data:`RATES`
    and, in the middle, 20 s with the endpoint unreachable. Every verb succeeds or
    raises a typed error (StorageError while S3 is down); both finish the drain.
    No task is lost, put twice, put in part or leased to two owners: every put
    that returned shows once; a put that raised shows whole once or not at all;
    each task was given to one taker once. Then the accelerated one calls touch,
    release, bury, kick, peek, delete and a sweeper pass through the faults: typed
    errors only (the portable engine's verbs: the Spark Connect client's test)."""
    root = gateway.root("faults")
    with FaultyS3(f"127.0.0.1:{gateway.port}", RATES, seed=7) as proxy:
        env = {**gateway.env, "AWS_ENDPOINT_URL": proxy.url}
        apps = {who: start(env, root, engine, who, order, tmp_path / f"{who}.json")
                for who, engine, order in (("a", "accelerated", "first"),
                                           ("b", "portable", "second"))}
        lines: dict[str, list[str]] = {"a": [], "b": []}
        back = threading.Timer(OUTAGE, proxy.restore)
        readers = [threading.Thread(target=follow, args=(apps["a"], apps["b"], proxy, back,
                                                         lines["a"])),
                   threading.Thread(target=lambda: lines["b"].extend(apps["b"].stdout or ()))]
        for reader in readers:
            reader.start()
        for app in apps.values():
            app.wait(timeout=900)
        for reader in readers:
            reader.join()
        back.cancel()
        injected = dict(proxy.injected)
    raised = finished(apps, lines, tmp_path, {"a": "accelerated", "b": "portable"}, injected,
                      first="a")
    record_property("summary", f"faults injected {injected}; verbs raised {dict(raised)}")


def test_a_spark_connect_client_drains_through_s3_faults_and_an_outage(
        gateway: S3Gateway, tmp_path: Path, record_property: Any) -> None:
    """The same drain (of 2 batches) and verbs as a Spark Connect client, the way Databricks runs
    sparkqueue: the server reaches S3 through the faults and the outage, and its
    failures reach the client over gRPC. They must still be typed errors, and no
    task lost, put twice, put in part or leased twice."""
    root = gateway.root("faults-connect")
    with FaultyS3(f"127.0.0.1:{gateway.port}", RATES, seed=11) as proxy:
        env = {**gateway.env, "AWS_ENDPOINT_URL": proxy.url}
        server = ConnectServer(conf={"spark.master": "local[1]", **SMALL, **FEW_RETRIES},
                               log=tmp_path / "server.log", s3=env)
        with one_start_at_a_time():  # Ivy resolves S3A's and Delta's packages
            server.start()
        try:
            app = start(env, root, server.url, "c", "first", tmp_path / "c.json", batches=2)
            lines: list[str] = []
            back = threading.Timer(OUTAGE, proxy.restore)
            follow(app, None, proxy, back, lines)
            app.wait(timeout=900)
            back.cancel()
        finally:
            server.stop()
        injected = dict(proxy.injected)
    raised = finished({"c": app}, {"c": lines}, tmp_path, {"c": "portable"}, injected,
                      first="c")
    record_property("summary", f"faults injected {injected}; verbs raised {dict(raised)}")


def finished(apps: dict[str, subprocess.Popen[str]], lines: dict[str, list[str]],
             out: Path, engines: dict[str, str],
             injected: dict[str, int], first: str) -> collections.Counter[str]:
    """The applications ended well on the ``engines`` asked for, and what they saw
    (written to ``out``) passes :func:`check_seen` (``first``: the one that called
    every verb): what the verbs raised."""
    for who, app in apps.items():
        assert app.returncode == 0, "".join(lines[who])[-4000:]
    seen = {who: json.loads((out / f"{who}.json").read_text()) for who in apps}
    assert {who: s["engine"] for who, s in seen.items()} == engines
    return check_seen(seen, injected, first)


def check_seen(seen: dict[str, dict[str, Any]], injected: dict[str, int],
               first: str) -> collections.Counter[str]:
    """Every kind of fault injected, every verb called by the application ``first``
    (no other verb by the others), typed errors only, and the tasks whole
    (:func:`check_tasks`): what the verbs raised."""
    assert {k: v > 0 for k, v in injected.items()} == dict.fromkeys(
        ("slowdown", "reset", "lost", "lost_commit", "outage"), True)
    assert [s["untyped"] for s in seen.values()] == [[] for _ in seen]
    assert {who: s["called"][-1:] for who, s in seen.items()} == {
        who: ["sweep"] if who == first else [] for who in seen}
    assert "delete" in seen[first]["called"], "no take gave tasks"
    raised: collections.Counter[str] = sum(
        (collections.Counter(s["errors"]) for s in seen.values()), collections.Counter())
    assert set(raised) <= {f"{verb}:StorageError" for verb in (
        "connect", "tube", "put", "take", "ack", "statistics", "tasks_by_state", "release_all",
        "create_tube",
        "touch", "release", "bury", "kick", "peek", "delete", "sweep")} | {
        "ack:TaskNotFound",  # an ack tried again after its answer was lost
        # Spark's error reading a returned DataFrame (its cause shown in it, or not)
        *(f"{verb}:{kind}" for verb in ("take", "tasks_by_state")
          for kind in ("read", "read-unrecognised"))}
    assert raised, "the outage reached the callers as errors"
    check_tasks(seen)
    return raised


def check_tasks(seen: dict[str, dict[str, Any]]) -> None:
    """0 lost, 0 put twice, 0 partial puts, 0 double leases."""
    taken = [tuple(t) for s in seen.values() for t in s["taken"]]  # (id, who, batch, i)
    ids = collections.Counter(t[0] for t in taken)
    assert [i for i, n in ids.items() if n > 1] == [], "a task given to two takers"
    by_batch: dict[tuple[str, int], list[int]] = collections.defaultdict(list)
    for _, who, batch, i in taken:
        by_batch[(who, batch)].append(i)
    for who, s in seen.items():
        for batch in s["put"]:  # returned: shown once, whole
            assert sorted(by_batch.pop((who, batch), [])) == list(range(SIZE)), (who, batch)
        for batch in s["uncertain"]:  # raised: shown once whole, or not at all
            assert sorted(by_batch.pop((who, batch), [])) in ([], list(range(SIZE)))
    assert by_batch == {}, "tasks no put made"
