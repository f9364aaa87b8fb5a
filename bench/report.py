"""The benchmark's report: BENCHMARKS.md from one run's figures, with when, at which
commit and on which machine they were measured."""

from __future__ import annotations

import os
import platform
import subprocess
import time
from importlib.metadata import version
from typing import Any

from . import engines, soak

#: figures that go in the report's header, not its table
HEADER = ("machine", "cores", "date", "sparkqueue", "core_speed_start_s", "core_speed_end_s")


def git_commit() -> str:
    """The commit this code is at, marked when the work tree has changes."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True,
                              cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + (" with uncommitted changes" if git("status", "--porcelain") else "")


def machine() -> str:
    """Cores, memory, OS, Python and the Spark and Delta versions."""
    memory = "?"
    if os.path.exists("/proc/meminfo"):
        with open("/proc/meminfo") as f:
            kib = int(f.readline().split()[1])
        memory = f"{kib / 2**20:.0f} GiB"
    return (f"{os.cpu_count()} cores, {memory}, {platform.system()} {platform.machine()}, "
            f"Python {platform.python_version()}, pyspark {version('pyspark')}, "
            f"delta-spark {version('delta-spark')}")


def core_speed() -> float:
    """Seconds a pure-Python loop of 20,000,000 additions takes: a hint of one core's
    speed for Python alone, before and after a run. Hosts of one machine type
    differ, and a shared host's speed varies from minute to minute; Spark's JVM
    can run slower while the loop does not. The plain-Delta baselines measure the
    host for what the benchmark does, which is why figures are compared as ratios."""
    start = time.perf_counter()
    total = 0
    for i in range(20_000_000):
        total += i
    return time.perf_counter() - start


def targets(figures: dict[str, Any]) -> list[tuple[str, str, float, float, bool]]:
    """Each target of the sections (``TARGETS`` of :mod:`bench.engines` and
    :mod:`bench.soak`: figure, bound, what) the run measured: (what, figure,
    measured, bound, met)."""
    return [(what, name, figures[name], bound, figures[name] <= bound)
            for name, bound, what in (*engines.TARGETS, *soak.TARGETS) if name in figures]


def target_lines(figures: dict[str, Any]) -> list[str]:
    """The report's table of targets this run measured (:func:`targets`)."""
    met = targets(figures)
    if not met:
        return []
    return ["## Targets", "", "| target | figure | measured | bound | met |",
            "| --- | --- | ---: | ---: | --- |",
            *[f"| {what} | {name} | {value:,.3f} | {bound:,.3f} | {'yes' if ok else 'no'} |"
              for what, name, value, bound, ok in met], ""]


def write_report(path: str, figures: dict[str, Any], argv: list[str]) -> None:
    """Write one run as Markdown: when, at which commit, where, how, and every figure
    (seconds, tasks per second) and ratio (time over the baseline's time)."""
    ratios = {k: v for k, v in figures.items() if k.endswith("_ratio")}
    values = {k: v for k, v in figures.items()
              if k not in ratios and k not in HEADER}

    def shown(v: Any) -> str:
        return f"{v:,.3f}" if isinstance(v, float) else str(v)

    lines = [
        "# Benchmarks", "",
        "Written by `make bench` (`python -m bench --write BENCHMARKS.md`) from one run;",
        "every figure is measured in that run, each against a plain-Delta baseline run",
        "in the same process. What each figure is: the docstrings of the bench package.",
        "Ratios are time over the baseline's time (below 1: faster than the baseline).",
        "", f"- date: {figures['date']}", f"- commit: {git_commit()}",
        f"- machine: {machine()}",
        "- one core's speed (a Python loop of 20,000,000 additions, seconds): "
        f"{figures['core_speed_start_s']:.2f} before the run, "
        f"{figures['core_speed_end_s']:.2f} after it",
        f"- command: `python -m bench {' '.join(argv)}`", "",
        *target_lines(figures),
        "## Ratios", "", "| figure | ratio |", "| --- | ---: |",
        *[f"| {k.removesuffix('_ratio')} | {shown(v)} |" for k, v in ratios.items()], "",
        "## Figures", "", "| figure | value |", "| --- | ---: |",
        *[f"| {k} | {shown(v)} |" for k, v in values.items()], "",
    ]
    with open(path, "w") as f:
        f.write("\n".join(lines))
