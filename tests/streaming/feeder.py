"""A streaming job for the sink tests: feeds a tube from a folder of JSON files.

Usage: python feeder.py ROOT TUBE SOURCE CHECKPOINT ; prints "put" after each
micro-batch's put commits and "finished" when the source is drained (availableNow).
"""

from __future__ import annotations

import sys

import sparkqueue


def main(argv: list[str]) -> int:
    root, name, source, checkpoint = argv
    spark = sparkqueue.session(app_name="feeder", master="local[1]",
                               conf={"spark.sql.shuffle.partitions": "1"})
    tube = sparkqueue.connect(spark, root).tube(name)
    tube.on_task_change(lambda df, event: print(event, flush=True))
    stream = spark.readStream.schema("n long").option("maxFilesPerTrigger", 1).json(source)
    tube.sink(stream, checkpoint, trigger={"availableNow": True}).awaitTermination()
    print("finished", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
