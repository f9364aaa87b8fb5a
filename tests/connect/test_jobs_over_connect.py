"""What users run, as Spark Connect clients (``SPARK_REMOTE`` set, as pyspark reads
it): the demo job, the ``sparkqueue`` command and the sweeper, and a notebook."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from sparkqueue import cli
from sparkqueue.server import ConnectServer

REPO = Path(__file__).resolve().parent.parent.parent


def run(args: list[str], url: str) -> str:
    done = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "SPARK_REMOTE": url}, timeout=600)
    assert done.returncode == 0, f"{args}: {done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.mark.main_line_only
def test_the_demo_and_the_command_line_over_connect(
        connect_server: ConnectServer, spark: SparkSession, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    root = str(tmp_path / "demo")
    out = run(["jobs/demo.py", "--root", root], connect_server.url)  # as `make demo` runs it
    assert "engine: portable" in out and "kicked: 1" in out
    monkeypatch.setenv("SPARK_REMOTE", connect_server.url)  # the command, on ``spark``
    capsys.readouterr()
    assert cli.main(["tubes", "--root", root]) == 0
    assert cli.main(["kick", "--root", root, "urls", "5"]) == 0
    assert capsys.readouterr().out.split() == ["mail", "urls", "0"]


# The quickstart notebook: the notebooks differ in what they do with the API, not in
# what Spark runs (tests/test_notebooks.py runs them all in a classic session).
# ``spark``: its sparkqueue.session() is this session (pyspark's default Spark Connect
# session), which the fixture stops before the server stops.
def test_a_notebook_over_connect(connect_server: ConnectServer, spark: SparkSession,
                                 tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK_REMOTE", connect_server.url)
    monkeypatch.setenv("NOTEBOOK_ROOT", str(tmp_path / "queues"))
    runpy.run_path(str(REPO / "notebooks" / "quickstart.py"), run_name="__main__")
