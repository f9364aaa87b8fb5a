"""The compatibility tier: sparkqueue's tests on every supported Spark line but the
main one, each in a venv of its own (``make test-compat``).

For each line of :data:`sparkqueue.store.lines.LINES` other than this venv's:

1. a venv at ``.venvs/spark-<line>`` on the line's Python (``python3.X`` from
   ``PATH``, else pyenv's ``~/.pyenv/versions/3.X.*``), holding the line's
   tested pyspark and delta-spark and sparkqueue itself (editable), made
   once and made again when the line's pins change;
2. pytest there, on :data:`TESTS`: the contract on a classic session (the
   engine the line runs there: every verb on fifottl, a round trip on fifo,
   utube, utubettl, limfifottl, a sharded tube and the portable store), a
   catalog tube, a sharded tube's ids and takes, a sink, ``changes``, a
   ``Consumer``, the sweeper through ``spark-submit`` and a SIGKILL, and
   tests/connect's smoke test of the portable engine as a Spark Connect client
   of a server of that line (tests/conftest.py's CLIENT_CONTRACT on
   utubettl, a notebook, a sink, a consumer and a sweep).

``python -m tests.compat [LINE ...]`` runs the lines named (default: all but
this one) and ends with one line of results per Spark line; its exit status
is non-zero if any line failed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from sparkqueue.store.lines import LINES, Line, installed
from tests.conftest import COMPAT

REPO = Path(__file__).resolve().parent.parent
VENVS = REPO / ".venvs"

#: What each line runs (paths and node ids, from the repository's root): a part of the
#: main line's suite (tests/conftest.py's COMPAT narrows the contract there), sized for
#: a few minutes a line.
TESTS = [
    "tests/contract",
    "tests/test_catalog.py::test_a_catalog_tube_on_the_accelerated_engine",
    "tests/test_shards.py::test_ids_name_their_shard_puts_take_turns_and_takes_move_on",
    "tests/streaming/test_streaming.py::"
    "test_sink_with_a_processing_time_trigger_resumes_from_its_checkpoint",
    "tests/streaming/test_streaming.py::test_change_feed_reports_each_transition",
    "tests/streaming/test_streaming.py::test_a_consumer_acks_each_batch_in_the_next_take_s_commit",
    "tests/test_sweeper.py::test_sweeper_job_through_spark_submit_survives_sigkill",
    "tests/test_spark_connect.py",
]


def python_for(line: Line) -> str:
    """The interpreter of ``line``'s Python: one of pyenv's builds, or on PATH (pyenv's
    shims on PATH may name versions that are not selected: each is tried)."""
    name = f"python{line.python}"
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    found = [str(p) for p in sorted(pyenv.glob(f"{line.python}.*/bin/{name}"), reverse=True)]
    on_path = shutil.which(name)
    for python in [*found, *([on_path] if on_path else [])]:
        if subprocess.run([python, "-c", ""], capture_output=True).returncode == 0:
            return python
    raise SystemExit(f"Spark {line.spark}'s tests run on Python {line.python}, and no "
                     f"{name} was found in {pyenv} or on PATH: install it "
                     f"(pyenv install {line.python}) or put it on PATH")


def requirements(line: Line) -> list[str]:
    """What the line's venv installs beside sparkqueue."""
    return [f"pyspark[connect]=={line.pyspark}", f"delta-spark=={line.delta}",
            "pandas<3", "pytest>=8", "pytest-xdist>=3.5", "chispa>=0.10", "matplotlib>=3.8"]


def venv_for(line: Line) -> Path:
    """The line's venv, made (or made again) when its requirements changed."""
    venv = VENVS / f"spark-{line.spark}"
    stamp = venv / "sparkqueue-compat.txt"
    wanted = "\n".join([python_for(line), *requirements(line)])
    if stamp.is_file() and stamp.read_text() == wanted:
        return venv
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([python_for(line), "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
           "--disable-pip-version-check"]
    # a current pip builds pyspark's sdist as a wheel (an old one runs its setup.py install)
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, "-e", str(REPO), *requirements(line)], check=True)
    stamp.write_text(wanted)
    return venv


def run_line(line: Line, extra: list[str]) -> tuple[bool, float]:
    """Run :data:`TESTS` in the line's venv: whether they passed, and the seconds taken."""
    started = time.monotonic()
    venv = venv_for(line)
    python = str(venv / "bin" / "python")
    env = {**os.environ, "PYSPARK_PYTHON": python, COMPAT: "1",
           "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("VIRTUAL_ENV", None)
    print(f"\n=== Spark {line.spark}: pyspark {line.pyspark}, delta-spark {line.delta}, "
          f"Python {line.python} ({venv})", flush=True)
    run = subprocess.run([python, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider",
                          *extra, *TESTS], cwd=REPO, env=env)
    return run.returncode == 0, time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lines", nargs="*", help="Spark lines (default: all but this venv's)")
    parser.add_argument("--pytest", default="", help="more pytest arguments, as one string")
    args = parser.parse_args(argv)
    mine = installed().line.spark
    chosen = args.lines or [spark for spark in LINES if spark != mine]
    unknown = [spark for spark in chosen if spark not in LINES]
    if unknown:
        parser.error(f"no such line: {', '.join(unknown)} (lines: {', '.join(LINES)})")
    results = {spark: run_line(LINES[spark], args.pytest.split()) for spark in chosen}
    print("\ncompatibility tier:")
    for spark, (ok, seconds) in results.items():
        line = LINES[spark]
        print(f"  Spark {spark} (pyspark {line.pyspark}, delta-spark {line.delta}, Python "
              f"{line.python}): {'passed' if ok else 'FAILED'} in {seconds:.0f} s")
    return 0 if all(ok for ok, _ in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
