# Databricks notebook source
# MAGIC %md
# MAGIC # A consumer loop
# MAGIC `sparkqueue.Consumer` takes batches and hands each to your function: what succeeds is
# MAGIC acked, what fails is released with a delay that doubles per attempt, and a task that
# MAGIC keeps failing is buried after `max_attempts`. It stops on SIGTERM/SIGINT, on
# MAGIC `stop()`, or when idle. Runs on Databricks and locally:
# MAGIC `python notebooks/consumer_loop.py`.

# COMMAND ----------

import os
import tempfile

import sparkqueue
from sparkqueue import Consumer, FakeClock

spark = sparkqueue.session()
root = os.environ.get("NOTEBOOK_ROOT") or tempfile.mkdtemp(prefix="sparkqueue-consumer-")
clock = FakeClock()  # time is simulated here so the retries need no waiting
sq = sparkqueue.connect(spark, root, clock=clock)
thumbs = sq.create_tube("thumbnails", "fifottl", ttr=60, if_not_exists=True)
thumbs.put([{"image": f"img-{i}.png", "corrupt": i == 3} for i in range(8)])

# COMMAND ----------


def make_thumbnails(batch):
    """Return the ids that failed; the rest are acked."""
    failed = []
    for row in batch.select("task_id", "data.*").collect():
        if row["corrupt"]:
            failed.append(row["task_id"])
    return failed


consumer = Consumer(thumbs, make_thumbnails, batch_size=100, max_attempts=2, retry_delay=30,
                    take_timeout=0, idle_timeout=0, report=print)
print(consumer.run())

# COMMAND ----------

# MAGIC %md The corrupt image was released for 30 s; when it fails again it is buried.

# COMMAND ----------

clock.advance(30)
print(consumer.run())
thumbs.tasks_by_state("buried").select("task_id", "data.image", "taken_count").show()
assert thumbs.statistics()["tasks"]["buried"] == 1
