# Databricks notebook source
# MAGIC %md
# MAGIC # A polite crawler: one sub-queue per domain
# MAGIC A `utubettl` tube keeps a sub-queue per `utube` value. With the domain as
# MAGIC sub-queue, pages of one domain are fetched strictly in order and never two
# MAGIC at once, while different domains are fetched in parallel: each take leases
# MAGIC the next URL of every domain that has none in flight. Runs on Databricks
# MAGIC and, unchanged, locally: `python notebooks/crawler.py` (the "web" below is
# MAGIC a dict, so it needs no network).

# COMMAND ----------

import os
import tempfile

from pyspark.sql import functions as F

import sparkqueue

spark = sparkqueue.session()  # on Databricks: the notebook's own session
root = os.environ.get("NOTEBOOK_ROOT") or tempfile.mkdtemp(prefix="sparkqueue-crawler-")
sq = sparkqueue.connect(spark, root, owner="crawler-1")
frontier = sq.create_tube("frontier", "utubettl", ttr=120, if_not_exists=True)

# A tiny web: page -> links on it.
WEB = {
    "https://a.example/": ["https://a.example/about", "https://b.example/"],
    "https://a.example/about": ["https://a.example/team"],
    "https://a.example/team": [],
    "https://b.example/": ["https://b.example/news", "https://c.example/"],
    "https://b.example/news": [],
    "https://c.example/": ["https://c.example/shop"],
    "https://c.example/shop": [],
}

# COMMAND ----------

# MAGIC %md Seed the frontier. `utube` takes a Column: the sub-queue of each row is its host.

# COMMAND ----------


def enqueue(urls: list[str]) -> None:
    if urls:
        links = spark.createDataFrame([(u,) for u in urls], "url string")
        frontier.put(links, utube=F.expr("parse_url(url, 'HOST')"))


enqueue(["https://a.example/", "https://a.example/about"])
frontier.tasks_by_state("ready").select("task_id", "utube", "data.url").show(truncate=False)

# COMMAND ----------

# MAGIC %md Crawl: each round takes the head URL of every idle domain, "fetches" it,
# MAGIC acks it and puts the links it found (each once).

# COMMAND ----------

seen = {"https://a.example/", "https://a.example/about"}
fetched: list[tuple[int, str, str]] = []
for round_no in range(10):
    batch = frontier.take(100)
    pages = [(r["task_id"], r["utube"], r["data"]["url"]) for r in batch.collect()]
    if not pages:
        break
    hosts = [host for _, host, _ in pages]
    assert len(hosts) == len(set(hosts)), "two pages of one domain in flight"
    print(f"round {round_no}: {[url for _, _, url in pages]}")
    fetched.extend(pages)
    found = [link for _, _, url in pages for link in WEB.get(url, [])]
    frontier.ack(batch)
    new = [u for u in dict.fromkeys(found) if u not in seen]
    seen.update(new)
    enqueue(new)

# COMMAND ----------

# MAGIC %md Every page was fetched once, and each domain's pages in the order they were found.

# COMMAND ----------

assert sorted(url for _, _, url in fetched) == sorted(WEB)
for host in {h for _, h, _ in fetched}:
    ids = [task_id for task_id, h, _ in fetched if h == host]
    assert ids == sorted(ids), host
print(frontier.statistics())
