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
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from . import store as st
from .engine import put as putting
from .engine import records, shards
from .engine.context import TubeContext
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
    if not st.is_dataframe(stream_df) or not stream_df.isStreaming:
        raise InvalidOption(f"sink() needs a streaming DataFrame, got {type(stream_df).__name__}"
                            f"{'' if not st.is_dataframe(stream_df) else ' (not streaming)'}")
    if not isinstance(checkpoint_location, str) or not checkpoint_location:
        raise InvalidOption(f"sink() needs a checkpoint location, got {checkpoint_location!r}")
    if trigger is not None and not isinstance(trigger, dict):
        raise InvalidOption(f"trigger must be a dict for DataStreamWriter.trigger(**trigger), "
                            f"e.g. {{'availableNow': True}}; got {trigger!r}")
    writer = (stream_df.writeStream
              .foreachBatch(PutBatches([p.context for p in tube.parts], checkpoint_location,
                                       put_opts))
              .option("checkpointLocation", checkpoint_location)
              .queryName(f"sparkqueue_sink_{tube.name}"))
    if trigger:
        try:
            writer = writer.trigger(**trigger)
        except (TypeError, ValueError) as e:
            raise InvalidOption(f"bad trigger {trigger!r}: {e}") from e
    return writer.start()


class PutBatches:
    """The ``foreachBatch`` function of :func:`sink`: each micro-batch one put,
    idempotent by the query's id (``txnAppId``) and the batch id (``txnVersion``).

    In a classic session it runs in this process, on the tube's own context.
    Over Spark Connect the server pickles it and calls it in a Python worker
    of its own (which must have sparkqueue installed), handing it batches of
    a session of its own: what crosses is the tube's recipe (root, name,
    driver, options, clock, settings, owner), from which it opens the tube
    once on that session, with the portable engine. ``on_task_change`` is
    not called there: the callback lives in the client.
    """

    _FIELDS = ("name", "type", "driver", "options", "clock", "config", "owner")

    def __init__(self, contexts: list[TubeContext], checkpoint_location: str,
                 put_opts: dict[str, Any]) -> None:
        ctx = contexts[0]
        self.contexts: list[TubeContext] | None = contexts
        self.opts: putting.PutOptions | None = putting.put_options(ctx, **put_opts)
        self.recipe = {k: getattr(ctx, k) for k in self._FIELDS}
        self.root = ctx.layout.root
        self.checkpoint = checkpoint_location.rstrip("/")
        self.put_opts = put_opts
        self.query_id: str | None = None

    def __getstate__(self) -> dict[str, Any]:
        """What a Spark Connect server's worker receives: no session, no live tube."""
        return {**self.__dict__, "contexts": None, "opts": None}

    def context(self, spark: SparkSession) -> tuple[list[TubeContext], putting.PutOptions]:
        """The contexts of the tube's shards and the put options; opened on ``spark``
        when not yet open."""
        if self.contexts is None or self.opts is None:
            layout = st.Layout(spark, self.root, "portable")
            options = self.recipe["options"]
            layout.place(self.recipe["name"], options.get("folder"), options.get("shards", 1))
            self.contexts = shards.shard_contexts(TubeContext(
                **self.recipe, layout=layout, spark=spark, emit=lambda tasks, event: None,
                registered=list))
            self.opts = putting.put_options(self.contexts[0], **self.put_opts)
        return self.contexts, self.opts

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        contexts, opts = self.context(batch.sparkSession)
        ctx = contexts[0]
        if self.query_id is None:  # written by Spark when the query first started
            metadata = f"{self.checkpoint}/metadata"
            text = ctx.layout.read_text(metadata)
            if text is None:
                raise StorageError(metadata, "the streaming query's checkpoint has no metadata")
            self.query_id = str(json.loads(text)["id"])
        txn = (f"sq-sink-{self.query_id}", batch_id)
        if len(contexts) == 1:
            ctx.guarded(lambda: putting.write_put(ctx, batch, False, False, opts, "put", txn=txn))
        else:  # a replayed batch goes to the same shards (by batch id), where its txn is
            shards.put(contexts, batch, False, False, opts, "put", batch_id, txn)


def _check_start(tube: Tube, starting_version: int | None) -> bool:
    """Refuse a ``starting_version`` that :func:`changes` would refuse once it has
    turned the feed on, before anything is written; whether the feed is off.

    A tube without a feed turns it on at a version after its current one, so
    any ``starting_version`` up to that one is before the feed."""
    if starting_version is not None and (isinstance(starting_version, bool) or not isinstance(
            starting_version, int) or starting_version < 0):
        raise InvalidOption(f"starting_version must be a table version (int >= 0), "
                            f"got {starting_version!r}")
    ctx = tube.context
    ref = ctx.layout.tasks(ctx.key)
    off = not ctx.guarded(lambda: st.keeps_feed(ctx.spark, ref))
    if off and starting_version is not None:
        latest = ctx.layout.latest_version(ref)
        if starting_version <= latest:
            raise InvalidOption(
                f"tube {tube.name!r} keeps no change feed yet: this call would turn it on "
                f"after version {latest}, so it holds no changes from starting_version "
                f"{starting_version}; create a tube with change_feed=True to keep them "
                "from its first put")
    return off


def changes(tubes: Sequence[Tube], starting_version: int | None) -> list[DataFrame]:
    """A streaming DataFrame of each tube's task transitions (a sharded tube's
    shards: each shard's ``starting_version`` refused or not before any
    shard's feed is turned on), from the Delta change data feed.

    One row per task a commit changed: ``status`` after the change (``done``
    when it left the tube: ack, delete, ttl expiry), ``event`` the operation
    (``put``, ``take``, ``release``, ``bury``, ``kick``, ``sweep``, ...;
    ``delete`` when it left the tube), ``version`` and ``committed_at`` of
    the commit. (The sweeper's compaction changes no data: it has no rows here.)
    Without ``starting_version``, Delta's default: the current tasks first
    (as ``insert``), then every change. Start it after the tube's first put:
    that put gives the table its payload column, a schema change that stops
    a running Delta stream.

    A tube keeps a feed from its creation with ``change_feed=True``; else the
    first call turns it on (one metadata commit), and the feed holds the
    changes from then on: a ``starting_version`` before that is refused.
    """
    off = [_check_start(t, starting_version) for t in tubes]
    return [_feed(t, starting_version, turning_on)
            for t, turning_on in zip(tubes, off, strict=True)]


def _feed(tube: Tube, starting_version: int | None, turning_on: bool) -> DataFrame:
    """:func:`changes` of one tube, its ``starting_version`` checked and
    ``turning_on`` whether its feed was off."""
    ctx = tube.context
    ref = ctx.layout.tasks(ctx.key)
    if turning_on:
        # lease records' tasks are written out before the feed is on: their takes
        # came before it
        records.settle_ids(ctx, None)
    ctx.retrying(lambda: st.keep_feed(ctx.spark, ref),
                 what=f"turning on tube {tube.name!r}'s change feed")
    if turning_on:
        # and again after: a record another consumer's take committed in between
        # would leave by its ack with no row in the feed (a take that started
        # before the feed was on and commits after conflicts with that commit)
        records.settle_ids(ctx, None)
    if starting_version is not None:
        first = ctx.guarded(lambda: st.feed_start(ctx.spark, ref))
        if starting_version < first:
            raise InvalidOption(
                f"tube {tube.name!r} keeps its changes from version {first} on (its change "
                f"feed was turned on then), not from starting_version {starting_version}; "
                "create a tube with change_feed=True to keep them from its first put")
    cdf = ctx.guarded(lambda: st.read_changes(ctx.spark, ref, starting_version))
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
