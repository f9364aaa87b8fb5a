"""A second Spark application for the concurrency tests: takes from a tube until it is empty.

Usage: python taker.py ROOT TUBE BATCH OUT_FILE [--ack] ; writes the taken ids, one per
line. With --ack it acks each batch and goes on until the tube holds no task (a utube
tube: an empty take only means every sub-queue is busy for now).
"""

from __future__ import annotations

import sys

import sparkqueue


def main(argv: list[str]) -> int:
    root, tube_name, batch, out = argv[0], argv[1], int(argv[2]), argv[3]
    acking = "--ack" in argv[4:]
    spark = sparkqueue.session(app_name="taker", master="local[1]",
                               conf={"spark.sql.shuffle.partitions": "1"})
    tube = sparkqueue.connect(spark, root, owner="other-process").tube(tube_name)
    taken: list[int] = []
    empty = 0
    while (tube.statistics()["tasks"]["total"] > 0) if acking else empty < 2:
        batch_df = tube.take(batch)
        got = [r["task_id"] for r in batch_df.collect()]
        if not taken:
            print("taking", flush=True)  # the test starts its own takes on this line
        empty = 0 if got else empty + 1
        taken.extend(got)
        with open(out, "a") as f:
            f.writelines(f"{i}\n" for i in got)
        if acking and got:
            tube.ack(batch_df)
    print(f"taker took {len(taken)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
