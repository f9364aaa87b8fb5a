"""A short crash torture (torture.py, beside this file): nothing lost, nothing acked twice."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ..jvm import short_lived

JOB = Path(__file__).parent / "torture.py"


@pytest.mark.slow
def test_killed_producers_and_consumers_lose_nothing_and_ack_nothing_twice(
        tmp_path: Path) -> None:
    """A short torture on S3 (a local S3 server; ``make torture`` runs longer ones, on
    a local folder by default): killed mid-put, mid-take, mid-ack or mid-sweep,
    nothing is lost, put twice or in part, or acked twice, and the statistics agree
    (torture.py's checks)."""
    done = subprocess.run(
        [sys.executable, str(JOB), "--seconds", "10", "--kills", "2", "--seed", "7",
         "--root", str(tmp_path), "--s3"],
        env=short_lived(), capture_output=True, text=True, timeout=900)
    report = [line for line in done.stdout.splitlines() if line[:4] in ("ok  ", "FAIL")]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert len(report) == 10 and all(line.startswith("ok") for line in report), done.stdout
    kills = int(done.stdout.split("kills: ", 1)[1].split()[0])
    assert kills >= 1, done.stdout
