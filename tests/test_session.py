"""A new local session as ``sparkqueue.session()`` starts it, in a process of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .jvm import short_lived

PROGRAM = """
import sys, sparkqueue
from pyspark.sql import functions as F, types as T
spark = sparkqueue.session(master="local[1]")
where = F.udf(lambda _: sys.executable, T.StringType())
print(spark.range(1).select(where("id")).first()[0])
"""


@pytest.mark.slow
def test_a_new_session_prints_nothing_and_runs_its_python_workers_on_its_own_python(
        tmp_path: Path) -> None:
    """The JVM's start (Ivy's resolution, Spark's log) prints nothing, and a Python
    UDF runs on this process's Python though ``python3`` on PATH is another (here
    one that fails): no PYSPARK_PYTHON needed."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3").write_text("#!/bin/sh\necho 'the python3 on PATH ran' >&2\nexit 3\n")
    (fake / "python3").chmod(0o755)
    env = short_lived(PATH=f"{fake}{os.pathsep}{os.environ['PATH']}")
    env.pop("PYSPARK_PYTHON", None)
    run = subprocess.run([sys.executable, "-c", PROGRAM], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert (run.stdout, run.stderr) == (f"{sys.executable}\n", "")
