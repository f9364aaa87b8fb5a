"""The benchmark's lines section: a new worker's drain on every supported Spark line.

For each line of :data:`sparkqueue.store.lines.LINES`, in that line's venv (this
one for its own line; for the others the compatibility tier's
``.venvs/spark-<line>``, made as ``make test-compat`` makes them), two new
processes of bench/e2e.py: one puts --rows tasks and drains them, take +
ack in batches of --batch, timed from the put call to the last ack (cold: the
session's start apart, the JIT's warm-up and the ingest paid); the other makes
a plain Delta append of the same rows (the line's baseline, cold too). Per
line: tasks per second, the drain's time over the line's plain append, and
over the drain of this venv's line.

    python -m bench.lines --rows 1000000 --json out.json        # the section alone
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from bench import emit
from bench.e2e import in_new_process
from sparkqueue.store.lines import LINES, installed
from tests.compat import venv_for


def bench_lines(root: str, rows: int, batch: int, memory: str,
                say: Callable[[str], None]) -> dict[str, float]:
    """The section's figures (see the module's docstring), named ``lines_<spark>_...``."""
    mine = installed().line.spark
    figures: dict[str, float] = {}
    for spark, line in LINES.items():
        python = sys.executable if spark == mine else str(venv_for(line) / "bin" / "python")
        say(f"Spark {spark}: take + ack of {rows} tasks in batches of {batch}, new processes")
        name = f"lines_{spark.replace('.', '_')}"
        drain = in_new_process(f"{root}/{name}_drain", "take_ack", rows, batch, 1, False,
                               memory, python)
        plain = in_new_process(f"{root}/{name}_plain", "plain", rows, batch, 1, False,
                               memory, python)
        figures[f"{name}_take_ack_tasks_per_s"] = drain["cold_tasks_per_s"]
        figures[f"{name}_take_ack_s"] = drain["cold_s"]
        figures[f"{name}_plain_append_s"] = plain["cold_s"]
        figures[f"{name}_take_ack_vs_plain_append_ratio"] = drain["cold_s"] / plain["cold_s"]
    main = f"lines_{mine.replace('.', '_')}_take_ack_s"
    for spark in LINES:
        name = f"lines_{spark.replace('.', '_')}"
        figures[f"{name}_take_ack_vs_spark_{mine.replace('.', '_')}_ratio"] = (
            figures[f"{name}_take_ack_s"] / figures[main])
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--root", required=True)
    parser.add_argument("--driver-memory", default="6g")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    figures = bench_lines(args.root, args.rows, args.batch, args.driver_memory,
                          lambda what: print(what, file=sys.stderr, flush=True))
    emit(figures, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
