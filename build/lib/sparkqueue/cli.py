"""The ``sparkqueue`` command, and the sweeper loop that ``jobs/sweeper.py`` runs.

    sparkqueue tubes  [--root ROOT]
    sparkqueue stats  [--root ROOT] [TUBE]
    sparkqueue peek   [--root ROOT] TUBE ID [ID ...]
    sparkqueue kick   [--root ROOT] TUBE [COUNT]
    sparkqueue sweep  [--root ROOT] [--tube NAME] [--once | --interval SECONDS]
    sparkqueue submit-args [--root ROOT]     # spark-submit's --packages (and --jars on S3)

Every command takes ``--conf FILE`` too. Errors are one line on stderr and
a non-zero exit status (1: the queue refused, 2: bad command line).
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from .config import Config, load_config
from .errors import QueueError

__all__ = ["main", "sweeper_parser", "run_sweeper"]


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--root", help="queue root (path or URI); default: conf's [queue].root")
    parser.add_argument("--conf", help="conf file (default: $SPARKQUEUE_CONF or "
                                       "conf/sparkqueue.toml)")


def add_sweep_args(parser: argparse.ArgumentParser) -> None:
    """The sweeper's options, shared by ``jobs/sweeper.py`` and ``sparkqueue sweep``."""
    _common(parser)
    parser.add_argument("--tube", help="sweep only this tube (default: every tube)")
    when = parser.add_mutually_exclusive_group()
    when.add_argument("--once", action="store_true", help="one pass, then exit")
    when.add_argument("--interval", type=float, metavar="SECONDS",
                      help="seconds between passes (default: conf's [sweeper].interval)")


def sweeper_parser(prog: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description="Run sparkqueue's sweeper: expiry, purges, maintenance, "
                               "statistics snapshots.")
    add_sweep_args(parser)
    return parser


def _config(args: argparse.Namespace) -> tuple[Config, str]:
    """The conf (``--conf`` or the default one) and the root (``--root`` or conf's)."""
    config = load_config(args.conf) if args.conf else load_config()
    return config, args.root or config.root


def _queue(args: argparse.Namespace, app: str) -> Any:
    """The Queue of the root the command names; its session's start-up prints
    nothing (:func:`sparkqueue.session`), so a command's own output stands out."""
    import sparkqueue

    config, root = _config(args)
    spark = sparkqueue.session(app_name=app, root=root)
    return sparkqueue.connect(spark, root, config=config)


def run_sweeper(args: argparse.Namespace, out: Callable[[str], None] = print,
                stop: threading.Event | None = None) -> int:
    """Sweep once, or every ``--interval`` seconds until SIGTERM/SIGINT (between passes)."""
    queue = _queue(args, "sparkqueue-sweeper")
    config: Config = queue.config
    if args.interval is not None and args.interval < 0:
        raise QueueError(f"--interval must be a non-negative number of seconds, "
                         f"got {args.interval}")
    interval = config.sweep_interval if args.interval is None else args.interval
    stop = stop or threading.Event()
    if not args.once and threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    while True:
        started = time.monotonic()
        out(f"sweep of {args.tube or 'every tube'} in {queue.root}")
        counts = queue.sweep(args.tube, progress=out)
        out("swept: " + " ".join(f"{k}={v}" for k, v in counts.items()))
        if args.once or stop.wait(max(0.0, interval - (time.monotonic() - started))):
            return 0


def _stats_table(name: str, stats: dict[str, dict[str, int]]) -> str:
    tasks, calls = stats["tasks"], stats["calls"]
    width = max(len(k) for k in [*tasks, *calls])
    lines = [f"tube {name}", "  tasks"]
    lines += [f"    {k:<{width}} {v:>12,}" for k, v in tasks.items()]
    lines.append("  calls")
    lines += [f"    {k:<{width}} {v:>12,}" for k, v in sorted(calls.items())]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sparkqueue`` console script."""
    parser = argparse.ArgumentParser(prog="sparkqueue", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    _common(sub.add_parser("tubes", help="list the tubes"))
    p = sub.add_parser("stats", help="statistics of one tube or of every tube")
    _common(p)
    p.add_argument("tube", nargs="?")
    p = sub.add_parser("peek", help="show tasks by id")
    _common(p)
    p.add_argument("tube")
    p.add_argument("ids", nargs="+", type=int, metavar="ID")
    p = sub.add_parser("kick", help="move up to COUNT buried tasks back to ready")
    _common(p)
    p.add_argument("tube")
    p.add_argument("count", nargs="?", type=int, default=1)
    add_sweep_args(sub.add_parser("sweep", help="run the sweeper (one pass with --once)"))
    _common(sub.add_parser("submit-args", help="the spark-submit options a job on the root "
                                               "needs beside conf/spark-submit.conf"))
    args = parser.parse_args(argv)
    try:
        if args.command == "sweep":
            return run_sweeper(args)
        if args.command == "submit-args":
            from .session import submit_args

            print(shlex.join(submit_args(_config(args)[1])))
            return 0
        queue = _queue(args, f"sparkqueue-{args.command}")
        if args.command == "tubes":
            for name in queue.tubes():
                print(name)
        elif args.command == "stats":
            names = [args.tube] if args.tube else queue.tubes()
            print("\n".join(_stats_table(n, queue.statistics(n)) for n in names)
                  or "no tubes")
        elif args.command == "peek":
            rows = queue.tube(args.tube).peek(args.ids).orderBy("task_id").collect()
            for r in rows:
                data = r["data"].asDict(recursive=True) if r["data"] is not None else {}
                print(f"{r['task_id']}\t{r['status']}\t{data}")
        elif args.command == "kick":
            print(queue.tube(args.tube).kick(args.count))
        return 0
    except QueueError as e:
        print(f"sparkqueue {args.command}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # one line, not a JVM stack trace
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(f"sparkqueue {args.command}: {type(e).__name__}: {first}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
