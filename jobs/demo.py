"""End-to-end sparkqueue example on a local embedded Spark (what `make demo` runs).

Creates tubes, puts a DataFrame, takes, acks, releases with a delay, buries
and kicks, prints statistics, and runs one sweeper pass. Time is real here except for one step
that moves an injected clock to show a delay ending without waiting.

    python jobs/demo.py [--root /tmp/sparkqueue-demo]
    spark-submit $(sparkqueue submit-args) jobs/demo.py
    SPARK_REMOTE=sc://127.0.0.1:15002 python jobs/demo.py   # through Spark Connect
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

from pyspark.sql import SparkSession

import sparkqueue
from sparkqueue import FakeClock


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="/tmp/sparkqueue-demo",
                        help="queue root, a path or s3a:// (its tubes are dropped first)")
    args = parser.parse_args(argv)
    if "://" not in args.root:
        shutil.rmtree(args.root, ignore_errors=True)

    ours = SparkSession.getActiveSession() is None  # else the caller's, left running
    spark = sparkqueue.session(app_name="sparkqueue-demo", root=args.root)
    clock = FakeClock(time.time())
    sq = sparkqueue.connect(spark, args.root, owner="demo-worker", clock=clock)
    for name in sq.tubes():  # an earlier run's, on a root that is not a local folder
        sq.tube(name).drop()
    print(f"root: {sq.root}")
    print(f"engine: {sq.engine} (SPARK_REMOTE={os.environ.get('SPARK_REMOTE', '')!r})")

    def step(title: str) -> None:
        print(f"\n== {title}")

    step("create tubes")
    urls = sq.create_tube("urls", "fifottl", ttr=60)
    mail = sq.create_tube("mail", "limfifottl", capacity=100)
    print("tubes:", sq.tubes())

    step("put a DataFrame of 6 tasks (one per row; every column is payload)")
    df = spark.createDataFrame(
        [(f"https://example.com/{i}", i % 3) for i in range(6)], "url string, depth int")
    urls.put(df).select("task_id", "status", "data").show(truncate=False)
    mail.put([{"to": "ops@example.com", "subject": "daily report"}])

    step("take 3 (one MERGE leases the lowest ids)")
    batch = urls.take(3)
    batch.select("task_id", "status", "owner", "data.url").show(truncate=False)

    step("ack 2 of them, release the third with a 30 s delay")
    ids = [r["task_id"] for r in batch.orderBy("task_id").collect()]
    urls.ack(ids[:2]).select("task_id", "status").show()
    urls.release(ids[2], delay=30).select("task_id", "status").show()

    step("bury a task that keeps failing, then kick it back")
    bad = urls.take(1)
    urls.bury(bad).select("task_id", "status").show()
    print("kicked:", urls.kick(1))

    step("move the injected clock 30 s: the delayed task is ready without a sweeper")
    clock.advance(30)
    urls.peek(ids[2]).select("task_id", "status").show()

    step("drain the rest in one take, ack it")
    rest = urls.take(100)
    print("took", rest.count(), "tasks; acked", urls.ack(rest).count())

    step("statistics (from the tables and the Delta commit log)")
    print(json.dumps(sq.statistics(), indent=2, sort_keys=True))

    step("one sweeper pass (what `spark-submit jobs/sweeper.py` runs on a schedule)")
    print(sq.sweep(progress=print))
    sq.statistics_history().select("tube", "at", "ready", "total", "purged").show()
    if ours:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
