"""sparkqueue's sweeper job: expiry, purges, maintenance and statistics snapshots.

    spark-submit --properties-file conf/spark-submit.conf $(sparkqueue submit-args) \\
        jobs/sweeper.py --root ROOT [--tube NAME] [--once | --interval SECONDS] [--conf FILE]
    python jobs/sweeper.py --root ROOT --once          # a local embedded Spark
    make sweep ROOT=/data/queues

Each pass calls ``Queue.sweep`` (see sparkqueue/sweep.py for what a pass
does and why it is safe to run beside consumers, twice at once, or to kill).
Without --once it sweeps every --interval seconds (conf's [sweeper].interval
by default) until SIGTERM or SIGINT, which it honours between passes.
"""

from __future__ import annotations

import sys

from sparkqueue.cli import run_sweeper, sweeper_parser
from sparkqueue.errors import QueueError


def main(argv: list[str] | None = None) -> int:
    args = sweeper_parser(prog="sweeper.py").parse_args(argv)
    try:
        return run_sweeper(args, out=lambda line: print(line, flush=True))
    except QueueError as e:
        print(f"sweeper: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
