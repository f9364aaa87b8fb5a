"""Shards: a tube split into N inboxes and tasks tables, so that consumers of different
shards never conflict.

Each shard is a whole tube's storage (an inbox and a tasks table of its own,
:func:`store.shard_key`): every commit of a take, ack or put touches one
shard's tables, and Delta's conflicts are per table, so commits on two
shards can never conflict, whatever the isolation level or predicates.
Task ids are spaced by shard (:meth:`TubeContext.task_id`): shard ``k`` of
``N`` numbers its tasks ``k, k + N, k + 2N, ...``, so an id names its shard
(``id % N``) and every by-id verb goes straight to it. Order holds within
a shard (a sharded fifo is ordered per shard, as SQS FIFO is per message
group); a sub-queue's tasks all go to one shard (:func:`utube_shard`), so
a utube keeps its per-sub-queue order.

Here is what the engine does across shards: the shards' contexts, where a
put goes, and a take that starts at one shard and moves on while they are
empty. ``sparkqueue.sharded`` puts the verbs on top.
"""

from __future__ import annotations

import time
import zlib
from dataclasses import replace
from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .. import store as st
from ..task import Task
from . import ingest as ing
from . import put as putting
from .context import TubeContext
from .take import take_once

__all__ = ["MAX_SHARDS", "shard_contexts", "utube_shard", "put", "home_shard", "take_any",
           "union"]

#: The most shards a tube may have: each is two Delta tables, and a take that finds
#: its shard empty looks at the others in turn.
MAX_SHARDS = 64


def shard_contexts(base: TubeContext) -> list[TubeContext]:
    """The contexts of every shard of ``base``'s tube (``base`` is shard 0), each with
    caches of its own."""
    return [base] + [replace(base, shard=k, options=dict(base.options), ingested_upto=-1,
                             stats_cache={}, schema=None, conflicts=0)
                     for k in range(1, base.shards)]


def utube_shard(utube: str, shards: int) -> int:
    """The shard of sub-queue ``utube``: CRC-32 of its UTF-8 bytes modulo ``shards``,
    as :func:`utube_shard_column` computes it in Spark."""
    return zlib.crc32(utube.encode("utf-8")) % shards


def utube_shard_column(utube: Column, shards: int) -> Column:
    """:func:`utube_shard` of a Column of sub-queues; rows without one go to shard 0
    (on a utube tube they share one sub-queue, see :func:`put`)."""
    crc = F.crc32(utube.cast("string").cast("binary"))
    return F.coalesce(F.pmod(crc, F.lit(shards)).cast("int"), F.lit(0))


def put(contexts: list[TubeContext], data: Any, single: bool, urgent: bool,
        opts: putting.PutOptions, event: str, turn: int,
        txn: tuple[str, int] | None = None) -> DataFrame | Task | None:
    """A put into a sharded tube: all of it to one shard (the sub-queue's, or shard
    ``turn % N``), unless the sub-queue is a Column: then each row goes to its
    sub-queue's shard, one commit per shard (each idempotent with ``txn``).
    On a utube tube, tasks without a sub-queue share one (Tarantool's rule),
    which lives in shard 0."""
    if st.is_column(opts.utube):
        return _put_rows_apart(contexts, data, single, urgent, opts, event, txn)
    n = len(contexts)
    if isinstance(opts.utube, str):
        k = utube_shard(opts.utube, n)
    else:
        k = 0 if contexts[0].driver.uses_utube else turn % n
    ctx = contexts[k]
    data = _conformed(contexts, ctx, data)
    return ctx.guarded(lambda: putting.write_put(ctx, data, single, urgent, opts, event, txn))


def _known_schema(contexts: list[TubeContext]) -> T.StructType | None:
    """The tube's payload schema: the first shard's that has one (puts make every
    shard's the same, see :func:`_conformed`)."""
    return next((s for c in contexts if (s := ing.payload_schema(c)) is not None), None)


def _conformed(contexts: list[TubeContext], ctx: TubeContext, data: Any) -> Any:
    """``data`` for shard ``ctx``: as it is, unless the shard has had no put yet and
    another has; then as a DataFrame of the tube's schema, so that this first put
    of the shard gives it the same payload schema as the others."""
    if ing.payload_schema(ctx) is not None:
        return data
    schema = _known_schema(contexts)
    if schema is None:
        return data
    frame, payload = putting.payload_of(ctx, data, schema)
    return frame.select(payload.alias("_sq_payload")).select("_sq_payload.*")


def _put_rows_apart(contexts: list[TubeContext], data: Any, single: bool, urgent: bool,
                    opts: putting.PutOptions, event: str,
                    txn: tuple[str, int] | None) -> DataFrame | Task | None:
    """A put whose sub-queues are per row: its rows split by shard, checked all
    together before the first shard's commit, so a bad row writes nothing."""
    ref = contexts[0]
    assert st.is_column(opts.utube)
    frame, payload = putting.payload_of(ref, data, _known_schema(contexts))
    staged = st.frozen(frame.select(payload.alias("_sq_payload"), "*")
                       .withColumn("_sq_shard", utube_shard_column(opts.utube, len(contexts))))
    rows, _ = putting.put_rows(ref, staged, F.col("_sq_payload"), opts, urgent)
    rows.agg(F.sum(F.hash(*rows.columns))).collect()  # every row's checks run: one job
    written: list[Any] = []
    for k in sorted(int(r[0]) for r in staged.select("_sq_shard").distinct().collect()):
        part = staged.where(F.col("_sq_shard") == k).select("_sq_payload.*")
        ctx = contexts[k]
        done = ctx.guarded(lambda c=ctx, p=part: putting.write_put(  # type: ignore[misc]
            c, _conformed(contexts, c, p), False, urgent, opts, event, txn))
        if done is not None:
            written.append(done)
    if not written:
        return None if txn is not None else ing.empty(ref)
    created = union(written)
    if single:
        row = created.first()
        assert row is not None
        return Task.from_row(row)
    return created


def home_shard(owner: str, shards: int) -> int:
    """The shard an owner's takes start from until one finds tasks elsewhere:
    CRC-32 of the owner's name, so that consumers of distinct names spread out."""
    return zlib.crc32(owner.encode("utf-8")) % shards


def take_any(contexts: list[TubeContext], start: int, n: int, wait: float, who: str,
             win: int) -> tuple[DataFrame, int]:
    """Up to ``n`` tasks from one shard, the first of ``start``, ``start + 1``, ...
    with any ready, waiting up to ``wait`` seconds for one; and that shard. A
    take never mixes shards, so what it returns is settled in one commit of
    one shard."""
    until = time.monotonic() + wait
    count = len(contexts)
    while True:
        for step in range(count):
            k = (start + step) % count
            got = take_once(contexts[k], n, who, win, None, wait if step == 0 else 0.0)
            if got is not None:
                return got, k
        remaining = until - time.monotonic()
        if remaining <= 0:
            return ing.empty(contexts[start]), start
        time.sleep(min(contexts[0].config.poll_interval, remaining))


def union(frames: list[DataFrame]) -> DataFrame:
    """The rows of ``frames`` (task rows of one tube's shards) as one DataFrame."""
    return reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), frames)
