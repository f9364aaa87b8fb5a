"""A second Spark application for the concurrency tests: takes from tubes on request.

Reads commands on stdin, one per line: ``ROOT TUBE BATCH OUT_FILE [--ack]``. For each it
takes from the tube until it is empty, appending the taken ids to OUT_FILE, one per line;
with --ack it acks each batch and goes on until the tube holds no task (on a utube tube
an empty take only means every sub-queue is busy for now). It prints ``ready`` once up,
``taking`` after a command's first take and ``took N`` when the command is done. One
application serves a whole test module: its start-up (a JVM with Spark and Delta) is paid
once.
"""

from __future__ import annotations

import shlex
import sys

from pyspark.sql import SparkSession

import sparkqueue


def serve(spark: SparkSession, root: str, tube_name: str, batch: int, out: str,
          acking: bool) -> int:
    """Take (and with ``acking`` ack) from the tube until done; how many were taken."""
    tube = sparkqueue.connect(spark, root, owner="other-process").tube(tube_name)
    taken: list[int] = []
    empty, first = 0, True
    while (tube.statistics()["tasks"]["total"] > 0) if acking else empty < 2:
        batch_df = tube.take(batch)
        got = [r["task_id"] for r in batch_df.collect()]
        if first:
            print("taking", flush=True)  # the test starts its own takes on this line
            first = False
        empty = 0 if got else empty + 1
        taken.extend(got)
        with open(out, "a") as f:
            f.writelines(f"{i}\n" for i in got)
        if acking and got:
            tube.ack(batch_df)
    return len(taken)


def main() -> int:
    spark = sparkqueue.session(app_name="taker", master="local[1]",
                               conf={"spark.sql.shuffle.partitions": "1"})
    print("ready", flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        root, tube, batch, out, *flags = shlex.split(line)
        print(f"took {serve(spark, root, tube, int(batch), out, '--ack' in flags)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
