"""A verb on named tasks (ack, release, touch, bury, done, dig, delete, requeue) as a
plan, then its execution: :func:`plan.settle_order` gives the order of
:data:`plan.SETTLE_RULES`, and each strategy has one executor."""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame

from .. import store as st
from .. import validate
from . import plan
from .context import TubeContext
from .ingest import empty
from .leased import on_whole_files
from .ops import collected_ids, mutate
from .verbs import Op

__all__ = ["settle", "settle_facts"]


def settle_facts(ctx: TubeContext, op: Op, tasks: Any,
                 extra: dict[str, Column] | None = None) -> plan.SettleFacts:
    """What a settling verb of ``op`` on ``tasks`` (as :func:`settle` has them)
    knows before it reads any task."""
    return plan.SettleFacts(engine=ctx.layout.engine, on_leases=op.on_leases,
                            listed=isinstance(tasks, list), value=bool(extra))


def settle(ctx: TubeContext, op: Op, tasks: Any, *, owner: str | None = None,
           extra: dict[str, Column] | None = None) -> DataFrame:
    """Commit ``op`` on ``tasks`` (ids, a DataFrame of ``task_id``) in one commit,
    all or nothing; the tasks it changed as of that commit (none: an empty
    DataFrame). Bad ids are refused before any commit. Each commit's tag
    names its strategy (``plan``)."""
    if op.on_leases and not extra:
        tasks = validate.task_ids(tasks)
        if st.is_dataframe(tasks):  # one Spark job: whole files need the ids listed
            tasks = collected_ids(ctx, tasks)
    facts = settle_facts(ctx, op, tasks, extra)
    if plan.Settle.WHOLE_FILES in plan.settle_order(facts):
        done = on_whole_files(ctx, op, tasks, ctx.who(owner))
        if done is not None:
            return done  # else not whole files: the statement
    changed = mutate(ctx, op, tasks, extra=extra, owner=owner,
                     tag_extra={"plan": plan.Settle.STATEMENT.value})
    return empty(ctx) if changed is None else changed
