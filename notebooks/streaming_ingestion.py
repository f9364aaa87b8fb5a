# Databricks notebook source
# MAGIC %md
# MAGIC # Streaming ingestion into a tube
# MAGIC Files land in a folder; a structured-streaming query turns every row into one task,
# MAGIC exactly once, even when the query crashes and restarts (each micro-batch is an
# MAGIC idempotent Delta append keyed by the query's id and the batch id). Runs on
# MAGIC Databricks and, unchanged, locally: `python notebooks/streaming_ingestion.py`.

# COMMAND ----------

import json
import os
import tempfile
from pathlib import Path

from pyspark.sql import functions as F

import sparkqueue

spark = sparkqueue.session()  # on Databricks: the notebook's own session
root = os.environ.get("NOTEBOOK_ROOT") or tempfile.mkdtemp(prefix="sparkqueue-streaming-")
sq = sparkqueue.connect(spark, root)
orders = sq.create_tube("orders", "utubettl", ttr=120, if_not_exists=True)

# a landing folder with two files of orders (on Databricks: a cloud storage path)
landing = Path(root) / "landing"
landing.mkdir(parents=True, exist_ok=True)
for part in range(2):
    rows = [{"order": 10 * part + i, "customer": f"c{i % 3}"} for i in range(5)]
    (landing / f"orders-{part}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))

# COMMAND ----------

# MAGIC %md One sub-queue per customer: a customer's orders are handled in order, one at a time.

# COMMAND ----------

stream = spark.readStream.schema("order long, customer string").json(str(landing))
query = orders.sink(stream, f"{root}/checkpoints/orders", trigger={"availableNow": True},
                    utube=F.col("customer"))
query.awaitTermination()
print(orders.statistics()["tasks"])
assert orders.statistics()["tasks"]["ready"] == 10

# COMMAND ----------

# MAGIC %md Running the same query again puts nothing twice: the checkpoint knows what was read.

# COMMAND ----------

orders.sink(stream, f"{root}/checkpoints/orders", trigger={"availableNow": True},
            utube=F.col("customer")).awaitTermination()
assert orders.statistics()["tasks"]["ready"] == 10
orders.take(10).groupBy("utube").count().orderBy("utube").show()  # one per customer
