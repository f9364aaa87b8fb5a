"""SingleTube: a tube of one shard, its verbs committed by the engine on one inbox and
one tasks table (:mod:`sparkqueue.engine`). What a user calls is :class:`Tube`'s."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, Row, Window
from pyspark.sql import functions as F

from . import store as st
from .engine import ingest as ing
from .engine import ops, settle, stats, verbs
from .engine import put as putting
from .engine import records as recs
from .engine import take as taking
from .errors import TaskNotFound
from .task import Task, TaskState
from .tube import Tasks, Tube

__all__ = ["SingleTube"]


class SingleTube(Tube):
    """A tube of one shard (and each shard of a sharded tube): every verb one
    commit of the engine on the context's tables."""

    @property
    def parts(self) -> list[SingleTube]:
        return [self]

    def apply_op(self, op: verbs.Op, tasks: Any, **kwargs: Any) -> DataFrame:
        """By the op's plan (:func:`settle.settle`)."""
        return settle.settle(self._ctx, op, tasks, **kwargs)

    def _put(self, data: Any, *, event: str, opts: putting.PutOptions,
             urgent: bool = False) -> DataFrame | Task:
        single = not isinstance(data, (*st.DATAFRAMES, list, tuple))
        out = self._ctx.guarded(
            lambda: putting.write_put(self._ctx, data, single, urgent, opts, event))
        assert out is not None  # only idempotent (sink) appends are ever skipped
        return out

    def _take(self, n: int, wait: float, who: str, win: int) -> DataFrame:
        return self._ctx.guarded(lambda: taking.take(self._ctx, n, wait, who, win))

    def _explain_take(self, n: int, who: str) -> dict[str, Any]:
        return taking.explain_take(self._ctx, n)

    def _requeue(self, tasks: Tasks, owner: str | None) -> DataFrame:
        rank = F.row_number().over(Window.orderBy("task_id")) - 1
        return self.apply_op(verbs.requeue(ops.queue_end(self._ctx)), tasks,
                             extra={"rank": rank}, owner=owner)

    def _done(self, ident: list[int], data: Any, owner: str | None) -> DataFrame:
        # the tasks table's: before any ingest it has none, and no task can be taken
        tube_schema = ing.data_schema(self._ctx, self._ctx.layout.tasks(self._ctx.key))
        frame, col = putting.payload_of(self._ctx, data, tube_schema)
        row = frame.select(col.alias("p")).first()
        assert row is not None
        if tube_schema is None:  # nothing was ever put: no task can be taken
            raise TaskNotFound(self.name, ident)
        value = putting.struct_literal(row["p"], tube_schema)
        return self.apply_op(verbs.DONE, ident, extra={"data": value}, owner=owner)

    def _kick(self, count: int) -> int:
        return ops.kick(self._ctx, count)

    def release_all(self) -> int:
        return ops.release_all(self._ctx)

    def _peek(self, ids: list[int] | DataFrame) -> DataFrame:
        def read() -> DataFrame:
            view = recs.view(self._ctx, self._ctx.now())
            if st.is_dataframe(ids):
                chosen = view.join(ids.select(F.col("task_id").cast("long")).distinct(),
                                   "task_id", "left_semi")
            else:
                chosen = view.where(F.col("task_id").isin(ids))
            return st.frozen(chosen.select(*st.PUBLIC_COLUMNS))
        return self._ctx.guarded(read)

    def _meta_row(self, ident: list[int], now: float) -> Row | None:
        return recs.task_row(self._ctx, ident, now)

    def _by_state(self, state: TaskState) -> DataFrame:
        return self._ctx.guarded(lambda: recs.view(self._ctx, self._ctx.now())
                                 .where(F.col("status") == state.value)
                                 .select(*st.PUBLIC_COLUMNS))

    def statistics(self) -> dict[str, dict[str, int]]:
        return self._ctx.guarded(lambda: stats.census(self._ctx, self._ctx.now())[0])

    def truncate(self) -> None:
        ing.truncate(self._ctx)
