"""A second Spark application for the capacity test: puts into tubes on request.

Reads commands on stdin, one per line: ``ROOT TUBE COUNT AT``. For each it waits until
the wall clock reaches AT (epoch seconds, so that two applications start their puts
together), puts COUNT tasks in one call and prints ``put ok`` or ``put full``
(CapacityExceeded). It prints ``ready`` once up.
"""

from __future__ import annotations

import sys
import threading
import time

import sparkqueue


def put_at(spark: object, root: str, tube: str, count: int, at: float) -> str:
    """Put ``count`` tasks into ``tube`` at wall-clock time ``at``: ``ok`` or ``full``."""
    t = sparkqueue.connect(spark, root, owner="putter").tube(tube)  # type: ignore[arg-type]
    threading.Event().wait(max(0.0, at - time.time()))
    try:
        t.put([{"n": i} for i in range(count)])
    except sparkqueue.CapacityExceeded:
        return "full"
    return "ok"


def main() -> int:
    spark = sparkqueue.session(app_name="putter", master="local[1]",
                               conf={"spark.sql.shuffle.partitions": "1"})
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip():
            root, tube, count, at = line.split()
            print(f"put {put_at(spark, root, tube, int(count), float(at))}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
