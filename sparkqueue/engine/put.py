"""put: options, payload and the inbox append (one commit; limfifottl puts in turn)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from .. import store as st
from .. import validate
from ..errors import (
    CapacityExceeded,
    InvalidOption,
    NotSupported,
    SchemaMismatch,
    Timeout,
)
from ..store import CommitTag
from ..task import LIVE_STATES, Task
from .context import TubeContext
from .ingest import data_schema, empty, payload_schema, pending_rows
from .records import live_tasks

#: The Delta transaction id that puts of a capacity tube record, one after another.
CAPACITY_TXN = "sq-capacity"

#: A per-row option that ``checked`` refused, in the write's error.
BAD_ROW = re.compile(r"sparkqueue:InvalidOption:0 (.*?)(?:\.? SQLSTATE|\n|$)")

@dataclass(frozen=True)
class PutOptions:
    """put()'s options, validated: Python values or Columns of per-row values."""

    pri: int | Column | None
    times: dict[str, float | Column]
    utube: str | Column | None
    timeout: float | None


def put_options(ctx: TubeContext, **opts: Any) -> PutOptions:
    """Put options checked against the driver and normalized, before any Spark job."""
    given = {k for k, v in opts.items() if v is not None}
    unsupported = given - ctx.driver.put_options()
    if unsupported:
        raise NotSupported(
            f"{ctx.type} tube {ctx.name!r} does not support put option(s) "
            f"{', '.join(sorted(unsupported))}; it supports "
            f"{', '.join(sorted(ctx.driver.put_options())) or 'none'}"
        )
    times = {k: validate.time_option(k, opts[k]) for k in ("ttl", "ttr", "delay")
             if opts.get(k) is not None}
    pri = opts.get("pri")
    if pri is not None and not st.is_column(pri):
        pri = validate.pri(pri)
    timeout = opts.get("timeout")
    if timeout is not None:
        timeout = validate.seconds("timeout", timeout)
    utube = opts.get("utube")
    if utube is not None and not (isinstance(utube, str) or st.is_column(utube)):
        raise InvalidOption(f"utube must be a string or a Column, got {utube!r}")
    return PutOptions(pri, times, utube, timeout)


def payload_of(ctx: TubeContext, data: Any,
               tube_schema: T.StructType | None) -> tuple[DataFrame, Column]:
    """``data`` as a DataFrame, and its payload: a struct Column of that frame's
    columns, conformed to the tube's schema. The frame keeps every column,
    as per-row options are Columns of them."""
    if st.is_dataframe(data):
        if not data.columns:
            raise InvalidOption("a DataFrame put needs at least one column")
        frame = data
    else:
        items = list(data) if isinstance(data, (list, tuple)) else [data]
        if not items:
            raise InvalidOption("put() of an empty list: nothing to put")
        kinds = {isinstance(i, dict) for i in items}
        if len(kinds) > 1:
            raise InvalidOption("put() list mixes dicts and scalars")
        if kinds == {True}:
            keys: list[str] = []
            for item in items:
                for k in item:
                    if not isinstance(k, str):
                        raise InvalidOption(f"payload keys must be strings, got {k!r}")
                    if k not in keys:
                        keys.append(k)
            rows = [tuple(item.get(k) for k in keys) for item in items]
        else:
            keys, rows = ["value"], [(i,) for i in items]
        if tube_schema is not None and set(keys) <= set(tube_schema.fieldNames()):
            order = tube_schema.fieldNames()
            rows = [tuple(dict(zip(keys, r, strict=True)).get(k) for k in order) for r in rows]
            try:
                frame = ctx.spark.createDataFrame(rows, tube_schema)
            except (TypeError, ValueError) as e:
                raise SchemaMismatch(
                    f"payload does not fit tube {ctx.name!r}'s schema "
                    f"{tube_schema.simpleString()}: {e}") from e
        else:
            try:
                frame = ctx.spark.createDataFrame(rows, keys)
            except (TypeError, ValueError) as e:
                raise InvalidOption(f"cannot build a payload from {items[:3]!r}: {e}") from e
    incoming = frame.schema
    if tube_schema is None or _fields(incoming) == _fields(tube_schema):
        # as it is: one SQL expression, not a Column per field (each a JVM round trip)
        return frame, F.expr(f"struct({', '.join(map(st.quoted, frame.columns))})")
    return frame, conform(incoming, tube_schema, ctx.name)


class SchemaRace(Exception):
    """A tube's first put lost to another first put, which gave the tube its payload
    schema (a Delta metadata change) in the meantime."""


def write_put(ctx: TubeContext, data: Any, single: bool, urgent: bool, opts: PutOptions,
              event: str, txn: tuple[str, int] | None = None) -> DataFrame | Task | None:
    """Append the tasks to the inbox in one commit; ``txn`` makes it idempotent.

    With ``txn = (app_id, version)`` Delta skips the append when a commit
    with that app id and a version at least as high exists (a micro-batch
    replayed after a crash): then nothing is written and None returned.
    A put of no rows writes nothing and returns no tasks.

    Two first puts of a tube at once (two applications starting on a new tube)
    both set its payload schema; Delta refuses the second commit, which is then
    put again conformed to the schema the first set.
    """
    try:
        return put_once(ctx, data, single, urgent, opts, event, txn)
    except SchemaRace:
        return put_once(ctx, data, single, urgent, opts, event, txn)


def put_once(ctx: TubeContext, data: Any, single: bool, urgent: bool, opts: PutOptions,
             event: str, txn: tuple[str, int] | None) -> DataFrame | Task | None:
    """:func:`write_put`, with the tube's payload schema as read now."""
    layout = ctx.layout
    inbox = layout.inbox(ctx.key)
    tube_schema = payload_schema(ctx)
    frame, payload = payload_of(ctx, data, tube_schema)
    rows, put = put_rows(ctx, frame, payload, opts, urgent)
    tag = CommitTag.new("put", put=put)
    if layout.inbox_has_tokens(ctx.key):
        rows = rows.withColumn("put_token", F.lit(tag.token))
    capacity = ctx.capacity() if ctx.driver.uses_capacity else 0
    until = time.monotonic() + (opts.timeout or 0.0)
    adding = frame.count() if capacity else -1
    deadline = ctx.deadline(opts.timeout or 0.0)
    first = tube_schema is None
    # a first put whose write cannot fail (Python rows, no per-row options) gives the
    # inbox its payload column apart, right before it appends
    apart = first and not put["columns"] and not st.is_dataframe(data)
    while True:
        if adding == 0:
            return empty(ctx)
        if time.monotonic() > deadline:
            raise Timeout(f"put to {ctx.name!r} kept losing its turn to other puts")
        anchor, before = layout.put_start(ctx.key)  # ids count from a cursor known before
        # Puts of a capacity tube commit in turn: each records the capacity
        # transaction id at one past the last one's, read before it counts the
        # live tasks. A put that committed after that count took the version,
        # so Delta skips this append (or refuses it, when they race) and it
        # counts again: two puts never both count the same room. (A sink's
        # micro-batch has its own transaction id: counted, unserialized.)
        claim = (layout.last_tag_value(inbox, CAPACITY_TXN) + 1 if capacity and not txn
                 else None)
        if capacity:
            wait_for_room(ctx, capacity, adding, until)
        if apart:
            apart, first = False, not give_inbox_payload(ctx, rows.schema["data"].dataType)
        appended = (append(ctx, rows, tag, txn, first, before) if claim is None else
                    append(ctx, rows, tag.adding(**{CAPACITY_TXN: claim}),
                           (CAPACITY_TXN, claim), first, before))
        # read at the put's own version: the sweeper purges ingested inbox rows later
        found = layout.commit_of(inbox, tag.token, before) if appended else None
        if found is None and appended and layout.latest_version(inbox) < before:
            # the tube was made anew since this process last looked (dropped, then
            # created again elsewhere): its commit and cursor are read afresh
            layout.forget(inbox)
            layout.forget(layout.tasks(ctx.key))
            anchor, found = layout.cursor(ctx.key), layout.commit_of(inbox, tag.token, -1)
        if found is not None:
            break
        if txn is not None:  # an idempotent append Delta skipped: written before
            return None
        if not capacity:  # Delta commits no append of no rows
            return empty(ctx)
    version = found[0]
    if tube_schema is None:
        give_payload_column(ctx, rows.schema["data"].dataType)
    pending = pending_rows(ctx, ctx.spark, anchor, version, after=version - 1,
                           columns=st.PUBLIC_COLUMNS)
    created = empty(ctx) if pending is None else pending
    ctx.emit(created, event)
    if single:
        row = created.first()
        assert row is not None
        return Task.from_row(row)
    return created


def give_inbox_payload(ctx: TubeContext, payload: T.DataType) -> bool:
    """Give a new tube's inbox the payload column (of type ``payload``, nullable in
    every part) in a commit of the schema alone, before its first put appends;
    True once it has. An append that adds a column leaves the list of files out
    of its version's checksum file, and the next put would rebuild the inbox's
    state to write it again.

    :class:`SchemaRace` where another first put gave the inbox its payload
    meanwhile (this put is then made again, conformed to it); False where Delta
    refused the change otherwise (it cannot spell the type): the append then
    adds the column itself."""
    inbox = ctx.layout.inbox(ctx.key)
    refused = add_payload_column(ctx, inbox, payload)
    if refused is not None and data_schema(ctx, inbox) is not None:
        raise SchemaRace(ctx.name) from refused
    return refused is None


def give_payload_column(ctx: TubeContext, payload: T.DataType) -> None:
    """Give a new tube's tasks table the payload column its first put gave the
    inbox (of type ``payload``, as the put wrote it; nullable in every part
    here), in a commit of the schema alone (``ALTER TABLE ... ADD COLUMNS``).

    Its first ingest would add the column otherwise, in the commit that adds
    its files; Delta then leaves the list of files out of that version's
    checksum file, and the commit after it (a first ack) rebuilds the table's
    state to write it again (two Spark jobs). A commit of the schema alone
    keeps the list. It may fail: another process's put or ingest added the
    column first, or Delta cannot spell the type. The put is committed either
    way, and an ingest adds the column where it is not.
    """
    add_payload_column(ctx, ctx.layout.tasks(ctx.key), payload)  # refused: see above


def add_payload_column(ctx: TubeContext, table: str, payload: T.DataType,
                       ) -> Exception | None:
    """Add the payload column ``data`` (of type ``payload``) to one of the tube's
    tables in a commit of the schema alone, tagged ``payload``; Delta's error
    where it refused (the column is there already, or it cannot spell the
    type), None once added. Nothing is written when it refuses."""
    with ctx.layout.tagged(CommitTag.new("payload")) as sess:
        try:
            st.add_column(sess, table, "data", payload)
        except Exception as e:  # noqa: BLE001 (the caller decides what a refusal means)
            return e
    return None


def put_rows(ctx: TubeContext, frame: DataFrame, payload: Column, opts: PutOptions,
             urgent: bool) -> tuple[DataFrame, dict[str, Any]]:
    """The inbox rows of a put, and its tag's options.

    Options that are one value for the whole put travel in the commit's tag,
    not in a million identical cells: the rows carry the payload and only the
    options given as Columns (checked as they are written). Ingest derives
    every task column from both (``task_columns``), the id from the row's
    place in the log.
    """
    put: dict[str, Any] = {"now": ctx.now()}
    cols: dict[str, Column] = {}
    for key in ("ttl", "ttr", "delay"):
        v = opts.times.get(key, ctx.default(key))
        if st.is_column(v):
            cols[key] = checked(v, key)
        elif v is not None:
            put[key] = float(v)
    put["pri"] = validate.URGENT_PRI if urgent else int(ctx.default("pri") or 0)
    if st.is_column(opts.pri):  # NULLs in it take the tube's default
        cols["pri"] = checked(opts.pri, "pri")
    elif isinstance(opts.pri, int):
        put["pri"] = opts.pri
    if st.is_column(opts.utube):
        cols["utube"] = opts.utube.cast("string")
    elif opts.utube is not None:
        put["utube"] = opts.utube
    put["columns"] = list(cols)  # none: a take may choose among the puts unread
    return frame.select(payload.alias("data"), *[c.alias(k) for k, c in cols.items()]), put


def append(ctx: TubeContext, rows: DataFrame, tag: CommitTag, txn: tuple[str, int] | None,
           first: bool, before: int) -> bool:
    """Append ``rows`` to the inbox tagged ``tag`` (idempotent with ``txn``);
    False when it conflicted with a put that records the same transaction id.
    ``first``: the tube's first put, which gives it its payload schema.

    A commit whose answer was lost (the storage failed after it wrote the
    commit file) raises, yet landed: the inbox's log after ``before`` says so
    (the tag's token), and the put is then done, not an error a caller would
    answer with the same put again."""
    try:
        st.append(rows, ctx.layout.inbox(ctx.key), tag=tag, file_rows=st.schema.INBOX_FILE_ROWS,
                  txn=txn, new_columns=first, existing=True)
    except Exception as e:
        if st.is_missing_table(e):  # the StorageError a look at its log gives
            ctx.layout.latest_version(ctx.layout.inbox(ctx.key))
        bad = BAD_ROW.search(str(e))
        if bad is not None:
            raise InvalidOption(f"put to {ctx.name!r}: a row's {bad.group(1)}") from e
        if st.is_conflict(e) and txn is not None and txn[0] == CAPACITY_TXN:
            return False
        if first and st.is_conflict(e):
            raise SchemaRace(ctx.name) from e
        if not st.is_conflict(e) and landed(ctx, tag, before):
            return True
        raise
    return True


def landed(ctx: TubeContext, tag: CommitTag, before: int) -> bool:
    """Whether the put tagged ``tag`` committed after ``before`` (False when the
    log cannot be read either)."""
    try:
        ctx.layout.forget(ctx.layout.inbox(ctx.key))
        return ctx.layout.commit_of(ctx.layout.inbox(ctx.key), tag.token, before) is not None
    except Exception:  # noqa: BLE001 (the append's own error says what failed)
        return False


def wait_for_room(ctx: TubeContext, capacity: int, adding: int, until: float) -> None:
    """Return once the tube's live tasks leave room for ``adding`` more; after
    ``until`` (monotonic seconds), :class:`CapacityExceeded`."""
    while True:
        live = live_tasks(ctx, ctx.now()).where(
            F.col("eff").isin([s.value for s in LIVE_STATES])).count()
        if live + adding <= capacity:
            return
        if time.monotonic() >= until:
            raise CapacityExceeded(ctx.name, capacity, live, adding)
        time.sleep(min(ctx.config.poll_interval, max(0.0, until - time.monotonic())))


def checked(col: Column, what: str) -> Column:
    """A per-row option's values, checked as the rows are written: a value that
    :mod:`validate` would refuse fails the write (nothing is committed) with an
    error naming the option and the value.

    ``pri``: an integer in ``PRI_RANGE`` (NULL: the put's). A time: a number of
    seconds, not NULL, negative or NaN, and finite unless it may never end.
    """
    if what == "pri":
        value = st.try_cast(col, "long")
        lo, hi = validate.PRI_RANGE
        bad = (col.isNotNull() & value.isNull()) | (value < lo) | (value > hi)
        rule = f"an integer from {lo} to {hi}"
    else:
        value = st.try_cast(col, "double")
        bad = value.isNull() | F.isnan(value) | (value < 0)
        if what not in validate.NEVER_ENDS:
            bad = bad | (value == float("inf"))
        rule = "a non-negative number of seconds" + (
            "" if what in validate.NEVER_ENDS else ", finite")
    shown = F.coalesce(st.try_cast(col, "string"), F.lit("NULL"))
    error = F.raise_error(F.concat(F.lit(f"sparkqueue:InvalidOption:0 {what} must be {rule}, "
                                         "got "), shown))
    return F.when(bad, error.cast("long" if what == "pri" else "double")).otherwise(value)

def conform(incoming: T.StructType, tube: T.StructType, name: str) -> Column:
    """The payload struct of a frame's columns ``incoming`` in the tube's schema,
    or SchemaMismatch naming the differences."""
    have = {f.name: f.dataType for f in tube.fields}
    problems = []
    for f in incoming.fields:
        if f.name not in have:
            problems.append(f"unknown field {f.name!r}")
        elif not _compatible(f.dataType, have[f.name]):
            problems.append(f"field {f.name!r} is {f.dataType.simpleString()}, "
                            f"expected {have[f.name].simpleString()}")
    if problems:
        raise SchemaMismatch(f"payload does not fit tube {name!r} (schema "
                             f"{tube.simpleString()}): {'; '.join(problems)}")
    present = set(incoming.fieldNames())
    return F.struct(*[
        (F.col(st.quoted(f.name)).cast(f.dataType) if f.name in present
         else F.lit(None).cast(f.dataType)).alias(f.name) for f in tube.fields
    ])

def _fields(schema: T.StructType) -> list[tuple[str, T.DataType]]:
    """Each field's name and type, its nullability left out (as an append ignores it)."""
    return [(f.name, f.dataType) for f in schema.fields]

_INTEGRAL = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)

def _compatible(a: T.DataType, b: T.DataType) -> bool:
    if a == b or isinstance(a, T.NullType):
        return True
    if isinstance(a, _INTEGRAL) and isinstance(b, (*_INTEGRAL, T.DoubleType)):
        return _INTEGRAL.index(type(a)) <= (_INTEGRAL.index(type(b)) if isinstance(
            b, _INTEGRAL) else 3)
    if isinstance(a, T.FloatType) and isinstance(b, T.DoubleType):
        return True
    return False

def struct_literal(value: Any, schema: T.StructType) -> Column:
    """A struct literal Column of ``value`` (a Row) in ``schema``."""
    fields = value.asDict(recursive=False) if value is not None else {}
    return F.struct(*[F.lit(fields.get(f.name)).cast(f.dataType).alias(f.name)
                      for f in schema.fields])
