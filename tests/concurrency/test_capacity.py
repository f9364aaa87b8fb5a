"""limfifottl capacity holds when two Spark applications put at once."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkqueue import CapacityExceeded, Queue

from ..jvm import short_lived

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def putter() -> Iterator[subprocess.Popen[str]]:
    """A second Spark application that puts when told to (putter.py)."""
    env = short_lived(PYTHONPATH=str(HERE.parent.parent))
    proc = subprocess.Popen([sys.executable, str(HERE / "putter.py")], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    read_until(proc, "ready")
    yield proc
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(timeout=120)


def read_until(proc: subprocess.Popen[str], word: str) -> str:
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith(word):
            return line.split()[-1]
    raise AssertionError(f"putter.py ended before {word!r}:\n" + "".join(seen[-40:]))


@pytest.mark.slow
def test_two_applications_putting_at_once_never_overshoot_the_capacity(
        sq: Queue, root: str, putter: subprocess.Popen[str]) -> None:
    """Two rounds: a tube of capacity 1,000 holding 900, and two applications each
    putting 100 at the same moment. Exactly one put fits in each round."""
    assert putter.stdin is not None
    outcomes = []
    for round_ in range(2):
        name = f"cap{round_}"
        t = sq.create_tube(name, "limfifottl", capacity=1000)
        t.put([{"n": i} for i in range(900)])
        at = time.time() + 1.5  # both wait for the same moment
        putter.stdin.write(f"{root} {name} 100 {at}\n")
        putter.stdin.flush()
        threading.Event().wait(max(0.0, at - time.time()))
        try:
            t.put([{"n": i} for i in range(100)])
            ours = "ok"
        except CapacityExceeded:
            ours = "full"
        theirs = read_until(putter, "put")
        total = t.statistics()["tasks"]["total"]
        outcomes.append((ours, theirs, total))
        assert total <= 1000, outcomes
    assert all(sorted(o[:2]) == ["full", "ok"] and o[2] == 1000 for o in outcomes), outcomes
