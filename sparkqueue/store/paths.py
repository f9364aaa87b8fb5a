"""A queue root's table paths, reads, and tagged sessions: what the rest of the store builds on."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import DataFrame, SparkSession

from .schema import USER_METADATA, CommitTag


class Paths:
    """Where a root's tables are, and the sessions that write them."""

    def __init__(self, spark: SparkSession, root: str) -> None:
        self.spark = spark
        self.root = root.rstrip("/")

    @property
    def registry(self) -> str:
        return f"{self.root}/_registry"

    @property
    def stats(self) -> str:
        """The statistics snapshots the sweeper appends (one row per tube per pass)."""
        return f"{self.root}/_stats"

    def inbox(self, tube: str) -> str:
        return f"{self.root}/tubes/{tube}/inbox"

    def tasks(self, tube: str) -> str:
        return f"{self.root}/tubes/{tube}/tasks"

    def tube_dir(self, tube: str) -> str:
        return f"{self.root}/tubes/{tube}"

    @contextmanager
    def tagged(self, tag: CommitTag) -> Iterator[SparkSession]:
        """A session of its own whose commits carry ``tag`` (thread-safe tagging)."""
        sess = self.spark.newSession()
        sess.conf.set(USER_METADATA, tag.json())
        # MERGE sources here are checkpointed and deterministic: copying them is waste.
        sess.conf.set("spark.databricks.delta.merge.materializeSource", "none")
        yield sess

    def read(self, path: str, spark: SparkSession | None = None,
             version: int | None = None) -> DataFrame:
        reader = (spark or self.spark).read.format("delta")
        if version is not None:
            reader = reader.option("versionAsOf", version)
        return reader.load(path)
