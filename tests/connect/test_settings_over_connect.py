"""A Spark Connect client's session is the caller's own: the settings a tagged
commit needs are set on it for the commit alone (:func:`sparkqueue.store.paths.settings`)."""

from __future__ import annotations

import json
from pathlib import Path

from pyspark.sql import SparkSession

from sparkqueue import Queue
from sparkqueue.store.paths import COMMIT_SETTINGS
from sparkqueue.store.schema import USER_METADATA


def test_the_callers_settings_are_as_they_were_after_each_verb(
        sq: Queue, spark: SparkSession, tmp_path: Path) -> None:
    names = [USER_METADATA, *COMMIT_SETTINGS]
    spark.conf.set(USER_METADATA, "the caller's")
    try:
        before = {name: spark.conf.get(name, None) for name in names}
        t = sq.create_tube("kept", "fifottl")
        t.put([{"n": 1}, {"n": 2}, {"n": 3}])
        t.ack(t.take(1))
        t.release(t.take(1))
        t.take(1)  # the released task, from the tasks table
        assert {name: spark.conf.get(name, None) for name in names} == before
        layout = t.context.layout
        tags = [json.loads(r["userMetadata"])["sq"] for r in spark.sql(
            f"DESCRIBE HISTORY delta.`{layout.table_path(layout.tasks('kept'))}`").collect()]
        assert {"create", "ingest+take", "take", "ack", "release"} <= set(tags), tags  # their own
        spark.range(1).write.format("delta").save(str(tmp_path / "own"))
        (own,) = spark.sql(f"DESCRIBE HISTORY delta.`{tmp_path / 'own'}`").collect()
        assert own["userMetadata"] == "the caller's"  # the caller's write: the caller's tag
    finally:
        spark.conf.unset(USER_METADATA)
