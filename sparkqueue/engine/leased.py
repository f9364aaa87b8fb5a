"""Verbs on a holder's whole leases: ack, release, touch, bury and delete of tasks that
fill whole data files, all leased by the caller, without a MERGE.

A take writes the tasks it leases into data files of their own
(:mod:`.take`, :mod:`.fresh`), so a consumer that acks, releases, touches,
buries or deletes the batch it got names exactly the rows of those files.
File statistics then show that every guard passes (each row taken by the
caller, its lease and ttl live), and the verb's commit needs no join: an ack
or a delete removes the files whole, reading and writing no data; the others
rewrite them with the op's SET applied, one Spark job (the write) where a
MERGE runs about a dozen (``bench/profile_ops.py``). It is the settle plan's
``whole-files`` strategy (:data:`.plan.SETTLE_RULES`), on a store that
commits chosen files; anything else (a task not so held, files shared with
other tasks, a table that keeps a change feed) goes the plan's next way, the
MERGE of :mod:`.ops`, which also says what is wrong.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame

from .. import store as st
from ..errors import Timeout
from ..store import CommitTag
from .clauses import action_set, lease_context
from .context import TubeContext
from .fresh import acked_result
from .plan import Settle
from .records import task_rows, with_action
from .verbs import Op

__all__ = ["on_whole_files", "settled_result"]


def on_whole_files(ctx: TubeContext, op: Op, ids: list[int], who: str) -> DataFrame | None:
    """Apply ``op`` (``on_leases``) to ``ids`` (sorted, distinct) where they are whole
    data files of ``who``'s live leases (:meth:`Layout.whole_leased_files`), in
    one commit: the files removed (an ack, ``op.action`` None) or rewritten
    with the op's SET. The changed tasks as of that commit (acked ones read
    ``done``), their ``on_task_change`` events sent; None, having committed
    nothing, when the ids are not such files (or a try lost to a concurrent
    commit until the tube's conflict timeout): the MERGE then applies the op
    or says why not.

    The commit removes the files it read, so a concurrent commit that
    changed one of them (removed it) makes Delta refuse this one; the retry
    then sees the files gone and leaves the ids to the MERGE.
    """
    layout = ctx.layout
    if not ids:
        return None
    path = layout.tasks(ctx.key)
    tag = CommitTag.new(op.name, plan=Settle.WHOLE_FILES.value)
    removed: list[str] = []

    def attempt() -> int | None:
        now = ctx.now()

        def whole(files: dict[str, dict[str, Any]]) -> list[str] | None:
            names = layout.whole_leased_files(path, files, ids, who, now, ctx.shards)
            removed[:] = names or []
            return names

        if op.action is None:  # (a lease record's file goes as its tasks' would)
            return layout.store.remove_files(path, whole, tag, rows=len(ids))
        txn = layout.store.begin(path)
        if txn.keeps_feed:
            return None  # the feed's rows are Delta's to write: the MERGE's
        files = txn.files
        names = whole(files) if files else None
        if not files or not names:
            return None
        with layout.tagged(tag) as sess:
            rows = with_action(task_rows(ctx, sess, names, files),
                               action_set(op, tag, lease_context(now, who)))
            version, written = txn.replace(names, rows, tag, st.file_rows(len(ids)), len(ids))
        if "status" not in op.action:  # still leased (a touch): their ack removes them whole
            layout.note_leased(path, [f["name"] for f in written], ids)
        return version

    try:
        version = ctx.retrying(attempt, what=f"{op.name} on {ctx.name!r}")
    except Timeout:  # lost to concurrent commits: the MERGE's turn
        return None
    if version is None:
        return None
    return settled_result(ctx, op, version, tag.token, ids, removed)


def settled_result(ctx: TubeContext, op: Op, version: int, token: str, ids: list[int],
                   removed: list[str]) -> DataFrame:
    """What a verb on the caller's own leases (``ids``, sorted) returns when its
    commit ``version`` (tagged ``token``) removed whole files or one lease
    record (``removed``): an ack's or a delete's tasks as acked
    (:func:`acked_result`), another verb's as it changed them; its event sent."""
    result = (acked_result(ctx, version, token, ids, removed) if op.action is None
              else ctx.layout.changed_at(ctx.key, version, token, ids[0], ids[-1])
              .select(*st.PUBLIC_COLUMNS))
    ctx.emit(result, op.name)
    return result
