"""The SQL of an :class:`~.verbs.Op`'s statements: its MERGE clauses, and the SET
of an updating op, formatted for the statement's now, owner and lease token."""

from __future__ import annotations

import uuid

from .. import store as st
from ..store import CommitTag, effective_status, sql_num
from .verbs import OWNED, Op


def merge_clauses(op: Op, tag: CommitTag, now: float, acking: bool) -> list[st.When]:
    """The MERGE clauses of ``op`` (the source carries ``arg_owner``, ``arg_token``
    and, with ``acking``, ``arg_ack`` for the acks riding along): the guard
    that fails the commit, the change, and the ids with no row."""
    sqlctx = sql_context(now, owner="s.arg_owner", token="s.arg_token")
    clauses: list[st.When] = []
    if op.guard:
        guard = op.guard.format(**sqlctx)
        if acking:
            guard = f"CASE WHEN s.arg_ack THEN ({OWNED.format(**sqlctx)}) ELSE ({guard}) END"
        clauses.append(st.When("update", f"({guard}) IS NOT NULL",
                               {"task_id": st.raise_guard(guard)}))
    if acking:
        clauses.append(st.When("delete", "s.arg_ack"))
    if op.delete_when:
        clauses.append(st.When("delete", op.delete_when.format(**sqlctx)))
    cond = f"NOT ({op.skip.format(**sqlctx)})" if op.skip else None
    clauses.append(st.When("delete", cond) if op.action is None
                   else st.When("update", cond, action_set(op, tag, sqlctx)))
    if op.missing:
        clauses.append(st.When("insert", None, {"task_id": st.raise_missing(op.missing)}))
    elif acking:
        clauses.append(st.When("insert", "s.arg_ack", {"task_id": st.raise_missing()}))
    return clauses


def sql_context(now: float, owner: str, token: str) -> dict[str, str]:
    """What an ``Op``'s SQL templates are formatted with: the effective status
    of the target row ``t`` at ``now``, ``now``, and the owner and lease token."""
    return {"eff": effective_status(now, "t."), "now": sql_num(now),
            "owner": owner, "token": token}


def lease_context(now: float, who: str) -> dict[str, str]:
    """:func:`sql_context` for a statement with no MERGE source: the owner ``who``
    and a new lease token as literals."""
    return sql_context(now, owner=st.sql_literal(who, "string"),
                       token=st.sql_literal(uuid.uuid4().hex, "string"))


def action_set(op: Op, tag: CommitTag, sqlctx: dict[str, str]) -> dict[str, str]:
    """The SET of an updating ``op``: its action, and who changed the row, in
    which commit, and when its state next changes by itself."""
    assert op.action is not None
    action: dict[str, str] = {k: v.format(**sqlctx) for k, v in op.action.items()}
    action["changed_by"] = f"'{op.name}'"
    action["change_token"] = f"'{tag.token}'"
    action["next_event"] = st.next_event(*(
        str(action.get(k, f"t.{k}")) for k in ("status", "delay_end", "lease_end", "ttl_end")))
    return action
