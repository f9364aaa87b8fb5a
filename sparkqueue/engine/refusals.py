"""What a verb's checks refuse, read without writing: the typed error that names every
offending id, before a commit (so that a refused verb writes nothing) or after
Delta's check failed one."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from .. import store as st
from ..errors import QueueError
from ..store import effective_status, sql_num
from . import records
from .context import TubeContext
from .records import live_tasks

if TYPE_CHECKING:
    from .verbs import Op


def settle_for(ctx: TubeContext, op: Op, ids: list[int] | DataFrame | None, who: str,
               now: float) -> bool:
    """Write out the lease records that may hold ``ids`` (None: every record) for
    ``op``'s MERGE, once its checks pass on every one of them: an op refused
    writes nothing (:func:`offenders` reads the records' tasks as they are).
    Whether it wrote any. Records are looked for at the version the caller
    read last (a record committed since is another's take, of other ids, or
    makes the MERGE's choice fail and try again)."""
    some = ids if isinstance(ids, list) else None
    if not records.holding(ctx, some):
        return False
    if ids is not None:
        frame = st.id_frame(ctx.spark, ids, ctx.shards) if isinstance(ids, list) else ids
        error = guard_error(ctx.name, offenders(ctx, op, frame, who, now), who)
        if error is not None:
            raise error
    return bool(records.settle_ids(ctx, some))


def diagnose(ctx: TubeContext, op: Op, ids: DataFrame, failed: tuple[str, int], who: str,
             now: float) -> QueueError:
    """Name every id that made ``op`` fail, for an error that says what was wrong."""
    op = replace(op, missing=op.missing or "TaskNotFound")
    error = guard_error(ctx.name, offenders(ctx, op, ids, who, now), who, failed)
    assert error is not None
    return error


def offenders(ctx: TubeContext, op: Op, ids: DataFrame, who: str, now: float) -> list[Any]:
    """The ids (``task_id`` of ``ids``) that ``op``'s checks would refuse at ``now``,
    read without writing: rows of ``id``, ``kind`` (the error) and ``state``."""
    live = live_tasks(ctx, now).alias("t")
    src = ids.select("task_id").withColumn("arg_owner", F.lit(who)).alias("s")
    joined = src.join(live, F.col("s.task_id") == F.col("t.task_id"), "left")
    eff = effective_status(now, "t.")
    kind_sql = (
        f"CASE WHEN t.task_id IS NULL THEN {st.sql_literal(op.missing, 'string')} "
        f"ELSE ({op.guard or 'NULL'}) END"
    ).format(eff=eff, now=sql_num(now))
    return (joined.selectExpr("s.task_id AS id", f"{kind_sql} AS kind", f"{eff} AS state")
            .where("kind IS NOT NULL").collect())


def guard_error(tube: str, rows: list[Any], who: str,
                failed: tuple[str, int] | None = None) -> QueueError | None:
    """The typed error for :func:`offenders`' rows (the gravest kind, with every id
    of it); ``failed``: the kind and an id Delta's check reported, when the rows
    show none (a change between the commit and the read). None: nothing to refuse."""
    kinds = {str(r["kind"]) for r in rows}
    kind = next((k for k in ("TaskNotFound", "NotOwner", "InvalidState") if k in kinds),
                failed[0] if failed else next(iter(sorted(kinds)), None))
    if kind is None:
        return None
    ids_of = sorted(int(r["id"]) for r in rows if r["kind"] == kind)
    if not ids_of and failed:
        ids_of = [failed[1]]
    states = {int(r["id"]): str(r["state"]) for r in rows}
    return st.typed_guard_error(tube, kind, ids_of, who, states)
