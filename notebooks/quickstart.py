# Databricks notebook source
# MAGIC %md
# MAGIC # sparkqueue quickstart
# MAGIC A tube is a Delta-backed work queue. Put a DataFrame of tasks, take a batch,
# MAGIC ack what worked, release what failed. Runs on Databricks and, unchanged,
# MAGIC locally: `python notebooks/quickstart.py`.

# COMMAND ----------

import os
import tempfile

import sparkqueue

spark = sparkqueue.session()  # on Databricks: the notebook's own session
root = os.environ.get("NOTEBOOK_ROOT") or tempfile.mkdtemp(prefix="sparkqueue-quickstart-")
sq = sparkqueue.connect(spark, root)
jobs = sq.create_tube("jobs", "fifottl", ttr=300, if_not_exists=True)

# COMMAND ----------

# MAGIC %md Put: one task per row; every column is the payload.

# COMMAND ----------

files = spark.createDataFrame(
    [(f"/landing/part-{i:04d}.parquet", 1000 * i) for i in range(5)], "path string, bytes long"
)
jobs.put(files).select("task_id", "status", "data.path").show(truncate=False)

# COMMAND ----------

# MAGIC %md Take a batch, process it, ack the good ones and release the rest with a delay.

# COMMAND ----------

batch = jobs.take(5)
good = batch.where("data.bytes > 0")
bad = batch.where("data.bytes = 0")
jobs.ack(good).select("task_id", "status").show()
jobs.release(bad, delay=60).select("task_id", "status").show()
print(jobs.statistics())
assert jobs.statistics()["tasks"]["delayed"] == 1
