"""What each verb changes: an :class:`Op` per verb, the one place its rule is written.

An Op says which task rows a verb may change and how, in SQL over the task's row
(``t``) and the row naming it (``s``: ``arg_owner``, and what the verb passes),
with the row's state at the clock's now as ``{eff}``: its *guard* names the
error for a row that must not change (a ``Stale`` row is left as it is), its
*action* the new values (None: the row is deleted). The engine commits it
(:func:`sparkqueue.engine.ops.mutate`, or without a MERGE where
:mod:`sparkqueue.engine.leased` may), all or nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..store import sql_num

__all__ = ["Op", "OWNED", "ACK", "UNBURY", "REQUEUE_CHECK", "DONE", "BURY", "KICK", "DIG",
           "DELETE", "RELEASE_ALL", "take", "release", "requeue", "touch"]


@dataclass(frozen=True)
class Op:
    """One state-changing MERGE: which rows may change, and how."""

    name: str
    guard: str | None  # SQL of the error kind for a row that must not change, or NULL
    action: dict[str, str] | None  # UPDATE SET; None means DELETE
    skip: str | None = None  # SQL: rows that match but are left as they are
    # error kind for ids with no row; None: such ids are passed over (a take's
    # choice that was deleted meanwhile), which keeps the MERGE matched-only
    missing: str | None = "TaskNotFound"
    # Whether the op may touch tasks still in the inbox (ready ones): only then is
    # the inbox ingested first. Ops on taken or buried tasks never need to.
    pending: bool = False
    # utube takes: each row's sub-queue must have no live lease in the snapshot the
    # MERGE commits on; the source then carries ``arg_busy`` for the guard
    exclusive: bool = False
    # SQL: matched rows to delete rather than update (the sweep's ttl expiry)
    delete_when: str | None = None
    # The guard only ever says Stale, and the action names its owner and token as
    # ``{owner}`` and ``{token}``: a choice of consecutive ids may then run as an
    # UPDATE of their id range that leaves stale rows as they are, instead of a
    # MERGE that joins a source (see ``update_range``)
    by_range: bool = False
    # The guard passes on every task the caller holds with a live lease, and the
    # action reads the task's own row alone (``t.``, no source): whole data files
    # of such tasks may be removed or rewritten without a MERGE (``engine.leased``)
    on_leases: bool = False
    # The chooser may pick tasks under a live lease (release_all): every lease
    # record is written out first, not only those whose leases ended
    chooses_leases: bool = False


#: The guard of a verb only the owner of a live lease may apply.
OWNED = ("CASE WHEN {eff} = 'expired' THEN 'TaskNotFound' "
         "WHEN {eff} <> 'taken' THEN 'InvalidState' "
         "WHEN t.owner <> s.arg_owner THEN 'NotOwner' END")

#: A lease given up: the row's owner, token and lease end cleared.
UNLEASED = {"owner": "NULL", "lease_token": "NULL", "lease_end": "0.0D"}

#: A buried task back to ready.
UNBURY = {"status": "'ready'", "delay_end": "0.0D"}

ACK = Op("ack", OWNED, None, on_leases=True)

#: What a requeue checks on every shard before any moves (:func:`requeue` moves).
REQUEUE_CHECK = Op("requeue", OWNED, {})

DONE = Op("done", OWNED, {"status": "'done'", **UNLEASED, "data": "s.arg_data"})

BURY = Op(
    "bury",
    "CASE WHEN {eff} = 'expired' THEN 'TaskNotFound' "
    "WHEN {eff} = 'done' THEN 'InvalidState' "
    "WHEN {eff} = 'taken' AND t.owner <> s.arg_owner THEN 'NotOwner' END",
    {"status": "'buried'", **UNLEASED, "delay_end": "0.0D",
     "buried_count": "t.buried_count + 1"},
    skip="{eff} = 'buried'",
    pending=True,
    on_leases=True,
)

KICK = Op("kick", "CASE WHEN {eff} <> 'buried' THEN 'Stale' END", UNBURY, missing=None)

DIG = Op("dig", "CASE WHEN {eff} = 'expired' THEN 'TaskNotFound' "
         "WHEN {eff} <> 'buried' THEN 'InvalidState' END", UNBURY)

DELETE = Op("delete", "CASE WHEN {eff} = 'expired' THEN 'TaskNotFound' END", None,
            pending=True, on_leases=True)

RELEASE_ALL = Op("release_all", "CASE WHEN {eff} <> 'taken' THEN 'Stale' END",
                 {"status": "'ready'", **UNLEASED}, missing=None, chooses_leases=True)


def take(exclusive: bool) -> Op:
    """A take's state change: ready tasks become taken by the caller, its lease
    counted from now (ttr, within ttl); ``exclusive`` (a utube tube): only where
    the sub-queue holds no live lease (``arg_busy``, see :func:`ops.with_busy`)."""
    return Op(
        "take",
        guard="CASE WHEN {eff} <> 'ready' THEN 'Stale' "
              + ("WHEN s.arg_busy THEN 'Stale' " if exclusive else "") + "END",
        action={
            "status": "'taken'",
            "owner": "{owner}",
            "lease_token": "{token}",
            "lease_end": "least({now} + t.ttr, t.ttl_end)",
            "taken_count": "t.taken_count + 1",
            "delay_end": "0.0D",
        },
        missing=None,
        pending=True,
        exclusive=exclusive,
        by_range=True,
    )


def release(delay: float, ttl: float | None) -> Op:
    """Taken tasks back to ``ready``, or ``delayed`` for ``delay`` seconds (> 0), which
    their ttl gains too (Tarantool's rule); ``ttl``: a fresh time to live from now."""
    action = {
        "status": "'delayed'" if delay > 0 else "'ready'",
        **UNLEASED,
        "delay_end": f"{{now}} + {sql_num(delay)}" if delay > 0 else "0.0D",
        "ttl_end": f"t.ttl_end + {sql_num(delay)}",
        "ttl": f"t.ttl + {sql_num(delay)}",
    }
    if ttl is not None:
        action["ttl"] = sql_num(ttl)
        action["ttl_end"] = f"{{now}} + {sql_num(delay)} + {sql_num(ttl)}"
    return Op("release", OWNED, action, on_leases=True)


def requeue(base: int) -> Op:
    """Taken tasks back to ``ready`` at the end of the queue: order keys from ``base``
    up, by the rank the verb passes (``arg_rank``)."""
    return Op("requeue", OWNED, {"status": "'ready'", **UNLEASED,
                                 "order_key": f"{base} + s.arg_rank"})


def touch(increment: float) -> Op:
    """The ttr and ttl of taken tasks extended by ``increment`` seconds."""
    inc = sql_num(increment)
    return Op("touch", OWNED, {"ttr": f"t.ttr + {inc}", "ttl": f"t.ttl + {inc}",
                               "ttl_end": f"t.ttl_end + {inc}",
                               "lease_end": f"least(t.lease_end + {inc}, t.ttl_end + {inc})"},
              on_leases=True)
