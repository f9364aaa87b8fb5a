"""The tests of tests/connect, as Spark Connect clients run sparkqueue: in a pytest
process of their own (pyspark runs one kind of session per process), which starts
a local Spark Connect server with Delta and stops it at the end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import CONNECT_TESTS

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_the_contract_holds_over_spark_connect(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp",
         str(tmp_path / "connect"), "tests/connect"],
        cwd=REPO, env={**os.environ, CONNECT_TESTS: "1"}, capture_output=True, text=True,
        timeout=1800)
    summary = run.stdout[-6000:]
    assert run.returncode == 0, f"tests/connect failed:\n{summary}\n{run.stderr[-2000:]}"
    assert " passed" in summary and "failed" not in summary, summary
