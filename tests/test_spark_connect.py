"""The tests of tests/connect, as Spark Connect clients run sparkqueue: in a pytest
process of their own (pyspark runs one kind of session per process), which starts
a local Spark Connect server with Delta and stops it at the end; and the server's
command (``python -m sparkqueue.server``) stopped as a supervisor stops it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sparkqueue.server import free_port

from .conftest import CONNECT_TESTS, one_start_at_a_time
from .jvm import short_lived

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


@pytest.mark.slow
def test_the_server_command_stops_its_jvm_on_sigterm(tmp_path: Path) -> None:
    """The server's JVM runs in a process group of its own: a SIGTERM to the command
    (``kill``, systemd, Kubernetes) must stop it too, not leave it holding the port."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "sparkqueue.server", "--port", str(port)],
                              cwd=tmp_path, env=short_lived(), text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert server.stdout is not None
    with one_start_at_a_time():
        said = [server.stdout.readline()]
        while said[-1] and "Spark Connect with Delta at" not in said[-1]:
            said.append(server.stdout.readline())
    assert f"sc://127.0.0.1:{port}" in said[-1], "".join(said)
    socket.create_connection(("127.0.0.1", port), timeout=5).close()

    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=120) == 128 + signal.SIGTERM
    with pytest.raises(OSError):  # the JVM went with it: nothing listens on the port
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
