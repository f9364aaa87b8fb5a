"""A verb on named tasks (ack, release, touch, bury, done, dig, delete, requeue) as a
plan, then its execution: :func:`plan.settle_order` gives the order of
:data:`plan.SETTLE_RULES`, and each strategy has one executor."""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame

from .. import store as st
from .. import validate
from ..errors import Timeout
from . import plan
from .context import TubeContext
from .ingest import empty
from .leased import on_whole_files
from .ops import acked_rows, collected_ids, mutate
from .verbs import Op

__all__ = ["settle", "settle_facts"]


def settle_facts(ctx: TubeContext, op: Op, tasks: Any,
                 extra: dict[str, Column] | None = None) -> plan.SettleFacts:
    """What a settling verb of ``op`` on ``tasks`` (as :func:`settle` has them)
    knows before it reads any task."""
    return plan.SettleFacts(engine=ctx.layout.engine, on_leases=op.on_leases,
                            listed=isinstance(tasks, list), value=bool(extra),
                            removes=op.action is None,
                            one=isinstance(tasks, list) and len(tasks) == 1)


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
    for strategy in plan.settle_order(facts)[:-1]:
        done = (on_whole_files(ctx, op, tasks, ctx.who(owner))
                if strategy is plan.Settle.WHOLE_FILES else ack_one(ctx, tasks[0], ctx.who(owner)))
        if done is not None:
            return done  # else not so: the statement
    changed = mutate(ctx, op, tasks, extra=extra, owner=owner,
                     tag_extra={"plan": plan.Settle.STATEMENT.value})
    return empty(ctx) if changed is None else changed


def ack_one(ctx: TubeContext, task: int, who: str) -> DataFrame | None:
    """Ack ``task`` by one DELETE of its row where ``who`` holds its live lease (the
    plan's ``one-task``): the acked task, its ``ack`` event sent; None where the
    DELETE found no such row (it then commits nothing) or lost to concurrent
    commits until the tube's conflict timeout: the MERGE then acks it or says
    why not. One row is deleted or not: all or nothing, as every ack."""
    layout = ctx.layout
    path = layout.tasks(ctx.key)
    tag = st.CommitTag.new("ack", plan=plan.Settle.ONE_TASK.value)

    def attempt() -> int | None:
        now = ctx.now()
        before = layout.latest_version(path)
        held = (f"task_id = {int(task)} AND owner = {st.sql_literal(who, 'string')} "
                f"AND {st.effective_status(now)} = 'taken'")
        with layout.tagged(tag) as sess:
            st.delete(sess, path, held)
        found = layout.commit_of(path, tag.token, before)
        return None if found is None else found[0]

    try:
        version = ctx.retrying(attempt, what=f"ack on {ctx.name!r}")
    except Timeout:  # lost to concurrent commits: the MERGE's turn
        return None
    if version is None:
        return None
    result = acked_rows(ctx, version, tag.token, [task])
    ctx.emit(result, "ack")
    return result
