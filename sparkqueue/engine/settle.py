"""A verb on named tasks (ack, release, touch, bury, done, dig, delete, requeue) as a
plan, then its execution: :func:`plan.settle_order` gives the order of
:data:`plan.SETTLE_RULES`, and each strategy has one executor."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession

from .. import store as st
from .. import validate
from ..errors import Timeout
from . import plan, records
from .clauses import action_set, lease_context
from .context import TubeContext
from .ingest import empty
from .leased import on_whole_files, settled_result
from .ops import acked_rows, collected_ids, mutate
from .records import Record
from .verbs import ACK, Op

__all__ = ["acks_apart", "settle", "settle_facts"]


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
    done = settle_apart(ctx, op, tasks, ctx.who(owner), plan.settle_order(facts)[:-1])
    if done is not None:
        return done
    changed = mutate(ctx, op, tasks, extra=extra, owner=owner,
                     tag_extra={"plan": plan.Settle.STATEMENT.value})
    return empty(ctx) if changed is None else changed


def settle_apart(ctx: TubeContext, op: Op, ids: list[int], who: str,
                 strategies: list[plan.Settle]) -> DataFrame | None:
    """``op`` on ``who``'s tasks ``ids`` by the first of ``strategies`` (none the
    statement) whose executor goes on: the changed tasks; None where each
    turned it down, having committed nothing."""
    for strategy in strategies:
        if strategy is plan.Settle.WHOLE_FILES:
            done = on_whole_files(ctx, op, ids, who)
        elif strategy is plan.Settle.ONE_RECORD:
            done = on_record(ctx, op, ids, who)
        else:
            done = removed_one(ctx, op, ids[0], who)
        if done is not None:
            return done
    return None


def acks_apart(ctx: TubeContext, ids: list[int], who: str) -> DataFrame | None:
    """An ack of ``who``'s tasks ``ids`` (sorted, distinct) by the settle plan's
    strategies that commit whole leases with no statement's join (whole files,
    one lease record), as a take does before it plans again without them
    (``Strategy.ACKS_APART``): the acked tasks, or None, having committed
    nothing, where they are not such leases."""
    order = plan.settle_order(settle_facts(ctx, ACK, ids))
    return settle_apart(ctx, ACK, ids, who, [
        s for s in order if s in (plan.Settle.WHOLE_FILES, plan.Settle.ONE_RECORD)])


def on_record(ctx: TubeContext, op: Op, ids: list[int], who: str) -> DataFrame | None:
    """``op`` (``on_leases``) on ``ids`` where they are the tasks of one lease record
    (:mod:`.records`) of ``who``'s, with its lease and ttl running, that this
    process wrote down (the plan's ``one-record``), in one commit: an ack or a
    delete, the settle row that closes the record (:func:`records.close`,
    checked at its commit by :func:`records.closes`), or on a table made
    before settle rows one DELETE of the record's row, its condition the
    guard; a release, touch or bury, one MERGE that replaces that row by its
    tasks with the op's SET (:func:`records.write_out`). The record's row is
    its whole lease, so the commit changes every task or none; changing
    nothing (the record settled or acked meanwhile, its time run out) it
    commits nothing, or its settle row closes nothing. The changed tasks,
    their event sent; None where they are no such record, or as
    :func:`committed_apart` says: the MERGE then applies the op or says why
    not."""
    layout = ctx.layout
    path = layout.tasks(ctx.key)
    found: list[str] = []  # the record's file

    def record_at(version: int, now: float) -> Record | None:
        files = layout.files_at(path, version)
        names = layout.whole_leased_files(path, files, ids, who, now, ctx.shards) if files else None
        found[:] = names or []
        return ctx.memory.record(path, names[0]) if names and len(names) == 1 else None

    known = layout.known_version(path)
    if record_at(known, ctx.now()) is None:
        return None  # no record of this process's holds them: no probe of the log
    closing = op.action is None and layout.settles_by_append(path)
    # a settle row's tag names the record's file and a version it was there at
    # (``stats.closed``: a retry reads it at a later one, where it is there too)
    tag = st.CommitTag.new(op.name, plan=plan.Settle.ONE_RECORD.value, tasks=len(ids),
                           **({"closes": found[0], "since": known} if closing else {}))
    closed: list[Record] = []

    def commit(version: int, now: float, sess: SparkSession) -> bool:
        record = record_at(version, now)
        if record is None:
            return False
        if closing:
            records.close(sess, path, record, who)
            closed[:] = [record]
        elif op.action is None:
            st.delete(sess, path, records.held(record, who, now))
        else:
            records.write_out(ctx, sess, [record], action_set(op, tag, lease_context(now, who)),
                              lambda prefix: records.held(record, who, now, prefix))
        return True

    version = committed_apart(ctx, op, tag, commit)
    if version is None:
        return None
    if closed and not records.closes(ctx, version, found[0], closed[0]):
        return None  # settled or gone before the settle row landed: it closed nothing
    return settled_result(ctx, op, version, tag.token, ids, found)


def removed_one(ctx: TubeContext, op: Op, task: int, who: str) -> DataFrame | None:
    """Ack or delete ``task`` by one DELETE of its row where ``who`` holds its live
    lease (the plan's ``one-task``): the removed task, its event sent; None
    as :func:`committed_apart` says: the MERGE then applies the op or says
    why not. One row is deleted or not: all or nothing, as every ack."""
    path = ctx.layout.tasks(ctx.key)
    tag = st.CommitTag.new(op.name, plan=plan.Settle.ONE_TASK.value)

    def commit(_: int, now: float, sess: SparkSession) -> bool:
        st.delete(sess, path, f"task_id = {int(task)} AND owner = {st.sql_literal(who, 'string')} "
                              f"AND {st.effective_status(now)} = 'taken'")
        return True

    version = committed_apart(ctx, op, tag, commit)
    if version is None:
        return None
    result = acked_rows(ctx, version, tag.token, [task])
    ctx.emit(result, op.name)
    return result


def committed_apart(ctx: TubeContext, op: Op, tag: st.CommitTag,
                    commit: Callable[[int, float, SparkSession], bool]) -> int | None:
    """One statement on the tasks table, tagged ``tag``: ``commit(version, now,
    session)`` runs it where its guard holds (the statement's condition holds
    it; False: it does not apply at that version and the clock's now),
    retried on conflicts; the version it committed. None where it did not
    apply, changed nothing (Delta then commits nothing), or lost to
    concurrent commits until the tube's conflict timeout.

    The first try starts from the version this process knows, with no probe
    of the log (a Spark job on the portable engine): the condition, not the
    version, keeps the statement right, and its commit is found after that
    version either way; a retry starts from the newest."""
    layout = ctx.layout
    path = layout.tasks(ctx.key)
    tries = [layout.known_version]

    def attempt() -> int | None:
        now = ctx.now()
        before = (tries.pop() if tries else layout.latest_version)(path)
        with layout.tagged(tag) as sess:
            if not commit(before, now, sess):
                return None
        found = layout.commit_of(path, tag.token, before)
        return None if found is None else found[0]

    try:
        return ctx.retrying(attempt, what=f"{op.name} on {ctx.name!r}")
    except Timeout:  # lost to concurrent commits: the MERGE's turn
        return None
