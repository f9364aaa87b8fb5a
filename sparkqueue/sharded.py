"""ShardedTube: the verbs of a tube of several shards (``create_tube(..., shards=N)``).

Each shard is a tube's storage of its own (see :mod:`sparkqueue.engine.shards`),
and the verbs route to them: a put to one shard (round robin, or its
sub-queue's), a take to the first shard with ready tasks from the caller's
own, a verb on ids to each id's shard (``task_id % N``). A verb on ids of one
shard is one commit, all or nothing, as on any tube. On ids of several
shards it is one commit per shard: first every shard's rows are checked as
the commits will check them (a bad id, a task taken by someone else), so
that a batch with one bad task writes nothing; a change another process
commits between that check and the commits can still leave part of such a
batch done (a take never returns tasks of two shards, so settling what a
take returned is always one commit).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F

from . import store as st
from . import validate
from .engine import ingest as ing
from .engine import ops, refusals, stats, verbs
from .engine import put as putting
from .engine import records as recs
from .engine import shards as sh
from .single import SingleTube
from .task import Task, TaskState
from .tube import Callback, Tasks, Tube

__all__ = ["ShardedTube"]


class ShardedTube(Tube):
    """A tube of several shards (:class:`SingleTube` each, ``parts``): the verbs of
    :class:`Tube`, each routed to the shards it concerns. The tube's clock,
    owner, defaults and driver, which its shards share, are read from the
    first's context."""

    def __init__(self, parts: list[SingleTube], callbacks: dict[str, Callback],
                 drop: Callable[[Tube], None]) -> None:
        super().__init__(parts[0].context, callbacks, drop)
        self._parts = parts
        self._turn = random.randrange(len(parts))  # where this process's next put goes
        self._homes: dict[str, int] = {}  # owner: the shard its next take starts from

    def __repr__(self) -> str:
        return f"Tube({self.name!r}, type={self.type!r}, shards={len(self._parts)})"

    @property
    def parts(self) -> list[SingleTube]:
        return list(self._parts)

    def _contexts(self) -> list[Any]:
        return [p.context for p in self._parts]

    def _conflicts(self) -> int:
        """Delta conflicts the shards' commits retried, through this tube object."""
        return sum(c.conflicts for c in self._contexts())

    # -- put and take ---------------------------------------------------------------

    def _put(self, data: Any, *, event: str, opts: putting.PutOptions,
             urgent: bool = False) -> DataFrame | Task:
        single = not isinstance(data, (*st.DATAFRAMES, list, tuple))
        self._turn = (self._turn + 1) % len(self._parts)
        out = sh.put(self._contexts(), data, single, urgent, opts, event, self._turn)
        assert out is not None  # only idempotent (sink) appends are ever skipped
        return out

    def _take(self, n: int, wait: float, who: str, win: int) -> DataFrame:
        """From one shard: the owner's own first (the one its last take found tasks
        in; at first, by a hash of the owner), then the others in turn while they
        have nothing ready. When the own shard's commit had to be retried after a
        conflict, the owner's next take starts at the next shard."""
        count = len(self._parts)
        start = self._homes.get(who, sh.home_shard(who, count))
        before = self._conflicts()
        batch, k = self._ctx.guarded(
            lambda: sh.take_any(self._contexts(), start, n, wait, who, win))
        self._homes[who] = (k + 1) % count if self._conflicts() > before else k
        return batch

    def _explain_take(self, n: int, who: str) -> dict[str, Any]:
        """For the shard ``who``'s take starts at (``shard``); when it has nothing
        ready the take moves on to the next."""
        start = self._homes.get(who, sh.home_shard(who, len(self._parts)))
        return {**self._parts[start].explain_take(n, owner=who), "shard": start}

    # -- verbs on ids ---------------------------------------------------------------

    def _route(self, tasks: Tasks) -> dict[int, list[int] | DataFrame]:
        """``tasks`` by shard: sorted ids per shard, or for a DataFrame too big to
        collect, its rows of each shard."""
        ids = validate.task_ids(tasks)
        if st.is_dataframe(ids):
            ids = ops.collected_ids(self._ctx, ids)
        count = len(self._parts)
        if not isinstance(ids, list):  # too many to collect
            shard = F.pmod(F.col("task_id").cast("long"), F.lit(count))
            return {k: ids.where(shard == k) for k in range(count)}
        out: dict[int, list[int]] = {}
        for i in ids:
            out.setdefault(i % count, []).append(i)
        return dict(out)

    def _each(self, tasks: Tasks, check: verbs.Op, owner: str | None,
              verb: Callable[[SingleTube, Any], DataFrame]) -> DataFrame:
        """``verb(shard, its ids)`` on each shard ``tasks`` name, the results as one;
        on several shards, only after ``check``'s guard passed on all of them."""
        routed = self._route(tasks)
        if not routed:
            return ing.empty(self._ctx)
        if len(routed) > 1:
            who, now = self._ctx.who(owner), self._ctx.now()
            rows: list[Any] = []
            for k, ids in routed.items():
                ctx = self._parts[k].context
                frame = st.id_frame(ctx.spark, ids, ctx.shards) if isinstance(ids, list) else ids
                rows += ctx.guarded(lambda c=ctx, f=frame: refusals.offenders(  # type: ignore[misc]
                    c, check, f, who, now))
            error = refusals.guard_error(self.name, rows, who)
            if error is not None:
                raise error
        return sh.union([verb(self._parts[k], ids) for k, ids in routed.items()])

    def apply_op(self, op: verbs.Op, tasks: Any, **kwargs: Any) -> DataFrame:
        return self._each(tasks, op, kwargs.get("owner"),
                          lambda part, ids: part.apply_op(op, ids, **kwargs))

    def _requeue(self, tasks: Tasks, owner: str | None) -> DataFrame:
        return self._each(tasks, verbs.REQUEUE_CHECK, owner,
                          lambda part, ids: part.requeue(ids, owner=owner))

    def _part_of(self, ident: list[int]) -> SingleTube:
        return self._parts[ident[0] % len(self._parts)]

    def _done(self, ident: list[int], data: Any, owner: str | None) -> DataFrame:
        return self._part_of(ident).done(ident[0], data, owner=owner)

    def _meta_row(self, ident: list[int], now: float) -> Row | None:
        return recs.task_row(self._part_of(ident).context, ident, now)

    def _peek(self, ids: list[int] | DataFrame) -> DataFrame:
        found = [self._parts[k].peek(part) for k, part in self._route(ids).items()]
        return sh.union(found) if found else ing.empty(self._ctx)

    # -- verbs on the whole tube -----------------------------------------------------

    def _kick(self, count: int) -> int:
        """Shard after shard (lowest ``(pri, id)`` first within each)."""
        kicked = 0
        for part in self._parts:
            if kicked < count:
                kicked += part.kick(count - kicked)
        return kicked

    def release_all(self) -> int:
        return sum(part.release_all() for part in self._parts)

    def _by_state(self, state: TaskState) -> DataFrame:
        return sh.union([part.tasks_by_state(state) for part in self._parts])

    def statistics(self) -> dict[str, dict[str, int]]:
        return self._ctx.guarded(lambda: stats.census_of(self._contexts(), self._ctx.now())[0])

    def truncate(self) -> None:
        for part in self._parts:
            part.truncate()
