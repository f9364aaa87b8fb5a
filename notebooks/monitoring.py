# Databricks notebook source
# MAGIC %md
# MAGIC # Monitoring a tube
# MAGIC Every sweeper pass (`spark-submit jobs/sweeper.py`) appends a statistics snapshot per
# MAGIC tube; `statistics_history()` reads them as a DataFrame. Here: queue depth and
# MAGIC throughput over time, as a plot. Time is simulated with an injected clock so the
# MAGIC notebook runs in seconds. Locally: `python notebooks/monitoring.py`.

# COMMAND ----------

import dataclasses
import os
import tempfile

import matplotlib

matplotlib.use("Agg")  # no display needed; Databricks shows the figure inline
import matplotlib.pyplot as plt  # noqa: E402

import sparkqueue  # noqa: E402
from sparkqueue import FakeClock  # noqa: E402

spark = sparkqueue.session()
root = os.environ.get("NOTEBOOK_ROOT") or tempfile.mkdtemp(prefix="sparkqueue-monitoring-")
clock = FakeClock()
# maintenance off for the demo: only snapshots
config = dataclasses.replace(sparkqueue.load_config(), compact_interval=float("inf"),
                             vacuum_interval=float("inf"))
sq = sparkqueue.connect(spark, root, clock=clock, config=config)
work = sq.create_tube("work", "fifottl", if_not_exists=True)

# COMMAND ----------

# MAGIC %md Simulate three minutes: work arrives faster than it is done, then the backlog drains.

# COMMAND ----------

for minute, (arrive, finish) in enumerate([(40, 10), (20, 30), (0, 20)]):
    if arrive:
        work.put([{"job": minute * 100 + i} for i in range(arrive)])
    work.ack(work.take(finish))
    clock.advance(60)
    sq.sweep("work")

history = sq.statistics_history("work").select("at", "ready", "total", "calls").collect()
for row in history:
    print(row["at"], row["ready"], row["calls"]["ack"])

# COMMAND ----------

times = [r["at"] for r in history]
minutes = [(t - times[0]) / 60 for t in times]
depth = [r["total"] for r in history]
acks = [r["calls"]["ack"] for r in history]
rate = [0.0] + [(acks[i] - acks[i - 1]) / (times[i] - times[i - 1]) * 60
                for i in range(1, len(history))]
fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(6, 4))
top.plot(minutes, depth, marker="o")
top.set_ylabel("tasks in the tube")
bottom.bar(minutes, rate, width=0.3)
bottom.set_ylabel("acks per minute")
bottom.set_xlabel("minutes")
fig.suptitle("tube 'work'")
fig.savefig(os.path.join(root, "monitoring.png"))
assert depth == [30, 20, 0], depth
