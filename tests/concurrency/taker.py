"""A second Spark application for the concurrency tests: takes from a tube until it is empty.

Usage: python taker.py ROOT TUBE BATCH OUT_FILE ; writes the taken ids, one per line.
"""

from __future__ import annotations

import sys

import sparkqueue


def main(argv: list[str]) -> int:
    root, tube_name, batch, out = argv[0], argv[1], int(argv[2]), argv[3]
    spark = sparkqueue.session(app_name="taker", master="local[1]",
                               conf={"spark.sql.shuffle.partitions": "1"})
    tube = sparkqueue.connect(spark, root, owner="other-process").tube(tube_name)
    taken: list[int] = []
    empty = 0
    while empty < 2:
        got = [r["task_id"] for r in tube.take(batch).collect()]
        if not taken:
            print("taking", flush=True)  # the test starts its own takes on this line
        empty = 0 if got else empty + 1
        taken.extend(got)
        with open(out, "a") as f:
            f.writelines(f"{i}\n" for i in got)
    print(f"taker took {len(taken)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
