"""Structured streaming: a sink that feeds a tube, and the change feed of its tasks.

The sink is ``foreachBatch`` with a Delta idempotent append per micro-batch:
``txnAppId`` is the streaming query's id (kept in its checkpoint, so stable
across restarts) and ``txnVersion`` the batch id. A batch replayed after a
crash, whose put had already committed, is skipped by Delta: every source
row becomes exactly one task. (A PySpark Python DataSource writer could not
do this: its commit runs in a Python worker without a SparkSession.)
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from .engine import put as putting
from .errors import InvalidOption, StorageError

if TYPE_CHECKING:
    from .tube import Tube

__all__ = ["sink", "changes", "CHANGE_COLUMNS"]

#: Columns of :func:`changes`, besides the payload ``data``.
CHANGE_COLUMNS = ["task_id", "status", "event", "owner", "pri", "utube", "taken_count",
                  "buried_count", "version", "committed_at"]


def sink(tube: Tube, stream_df: DataFrame, checkpoint_location: str,
         trigger: dict[str, Any] | None, put_opts: dict[str, Any]) -> StreamingQuery:
    """Start a streaming query putting every row of ``stream_df`` into ``tube``, exactly once."""
    if not isinstance(stream_df, DataFrame) or not stream_df.isStreaming:
        raise InvalidOption(f"sink() needs a streaming DataFrame, got {type(stream_df).__name__}"
                            f"{'' if not isinstance(stream_df, DataFrame) else ' (not streaming)'}")
    if not isinstance(checkpoint_location, str) or not checkpoint_location:
        raise InvalidOption(f"sink() needs a checkpoint location, got {checkpoint_location!r}")
    if trigger is not None and not isinstance(trigger, dict):
        raise InvalidOption(f"trigger must be a dict for DataStreamWriter.trigger(**trigger), "
                            f"e.g. {{'availableNow': True}}; got {trigger!r}")
    opts = putting.put_options(tube.context, **put_opts)
    query_id: list[str] = []

    def put_batch(batch: DataFrame, batch_id: int) -> None:
        if not query_id:  # written by Spark when the query first started
            metadata = f"{checkpoint_location.rstrip('/')}/metadata"
            text = tube.context.layout.read_text(metadata)
            if text is None:
                raise StorageError(metadata, "the streaming query's checkpoint has no metadata")
            query_id.append(json.loads(text)["id"])
        ctx = tube.context
        ctx.guarded(lambda: putting.write_put(ctx, batch, False, False, opts, "put",
                                              txn=(f"sq-sink-{query_id[0]}", batch_id)))

    writer = (stream_df.writeStream.foreachBatch(put_batch)
              .option("checkpointLocation", checkpoint_location)
              .queryName(f"sparkqueue_sink_{tube.name}"))
    if trigger:
        try:
            writer = writer.trigger(**trigger)
        except (TypeError, ValueError) as e:
            raise InvalidOption(f"bad trigger {trigger!r}: {e}") from e
    return writer.start()


def changes(tube: Tube, starting_version: int | None) -> DataFrame:
    """A streaming DataFrame of the tube's task transitions, from the Delta change data feed.

    One row per task a commit changed: ``status`` after the change (``done``
    when it left the tube: ack, delete, ttl expiry), ``event`` the operation
    (``put``, ``take``, ``release``, ``bury``, ``kick``, ``sweep``, ...;
    ``delete`` when it left the tube), ``version`` and ``committed_at`` of
    the commit. (The sweeper's compaction changes no data: it has no rows here.)
    Without ``starting_version``, Delta's default: the current tasks first
    (as ``insert``), then every change. Start it after the tube's first put:
    that put gives the table its payload column, a schema change that stops
    a running Delta stream.
    """
    if starting_version is not None and (isinstance(starting_version, bool) or not isinstance(
            starting_version, int) or starting_version < 0):
        raise InvalidOption(f"starting_version must be a table version (int >= 0), "
                            f"got {starting_version!r}")
    reader = tube.context.spark.readStream.format("delta").option("readChangeFeed", "true")
    if starting_version is not None:
        reader = reader.option("startingVersion", starting_version)
    cdf = tube.context.guarded(lambda: reader.load(tube.context.layout.tasks(tube.name)))
    deleted = F.col("_change_type") == "delete"
    return (cdf.where("task_id >= 0 AND _change_type IN ('insert', 'update_postimage', 'delete')")
            .select(
                "task_id",
                F.when(deleted, F.lit("done")).otherwise(F.col("status")).alias("status"),
                F.when(deleted, F.lit("delete")).otherwise(F.col("changed_by")).alias("event"),
                "owner", "pri", "utube", "taken_count", "buried_count",
                F.col("_commit_version").alias("version"),
                F.col("_commit_timestamp").alias("committed_at"),
                *(["data"] if "data" in cdf.columns else [])))
