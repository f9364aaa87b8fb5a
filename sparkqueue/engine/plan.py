"""The take's plan: which strategy a take tries first, and which after, from facts
known before it reads any task. Pure: no Spark, no JVM (``make test-fast``).

A take (:func:`sparkqueue.engine.take.take_once`) gathers :class:`TakeFacts`,
asks :func:`plan_take` for a strategy and runs that strategy's executor. An
executor checks its premise again inside its own transaction (the file
statistics of its snapshot, the puts' tags, a conflict): where it does not
hold, the executor commits nothing and the take asks for the next strategy,
the ones tried left out. :data:`TAKE_RULES` is the table, in order;
:func:`decision_table` writes it as docs/design.md shows it, and
``Tube.explain_take`` reports a take's plan without taking anything.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Strategy", "TakeFacts", "Rule", "TAKE_RULES", "COLLECT_UPTO", "plan_take",
           "plan_order", "reads_inbox", "explained", "decision_table"]

#: Choices of at most this many tasks are collected to the driver (one Spark job less);
#: a take of sub-queue heads leases at most this many.
COLLECT_UPTO = 10_000


class Strategy(enum.Enum):
    """How a take commits; the value is what its commit's tag names (``plan``)."""

    #: one append to the tasks table through Delta's transaction API: the puts not yet
    #: ingested, the chosen ones leased (a lease record, when their tags settle the
    #: choice and it leases every task it ingests) (``engine.fresh``)
    NEW_PUTS = "new-puts"
    #: the data files that file statistics show hold the ``n`` lowest ready tasks,
    #: rewritten in one commit with the leased rows in files of their own
    HEAD_FILES = "head-files"
    #: the heads of free sub-queues chosen in one query over the snapshot's files that
    #: may hold a ready task or a lease; their files rewritten in one commit
    SUB_QUEUE_HEADS = "sub-queue-heads"
    #: an ingest, then one UPDATE of an id range (when the chosen tasks are
    #: consecutive ids) or one MERGE of the choice (``engine.ops.apply``)
    STATEMENT = "update-or-merge"


@dataclass(frozen=True)
class TakeFacts:
    """What a take knows before it reads any task.

    ``engine``: ``accelerated`` or ``portable``; ``head_only`` and
    ``sub_queue_heads``: the driver's promises (it looks only at the lowest
    ready tasks; at the heads of free sub-queues); ``puts_waiting``: whether
    the inbox holds puts not ingested yet (None: not asked, see
    :func:`reads_inbox`); ``n``: how many; ``acks``: a Consumer's previous
    batch rides with the take; ``paired``: only a take that commits the acks
    with it will do (a Consumer's first try: the statement is left out).
    """

    engine: str
    head_only: bool
    sub_queue_heads: bool
    n: int
    puts_waiting: bool | None = None
    acks: bool = False
    paired: bool = False

    @property
    def accelerated(self) -> bool:
        return self.engine == "accelerated"


@dataclass(frozen=True)
class Rule:
    """One row of the table: a strategy, when it applies (``when``: words for the
    docs; ``applies``: the test) and why it goes there."""

    strategy: Strategy
    when: str
    why: str
    applies: Callable[[TakeFacts], bool]


def _new_puts_static(f: TakeFacts) -> bool:
    return f.accelerated and (f.head_only or (f.sub_queue_heads and not f.paired))


TAKE_RULES: tuple[Rule, ...] = (
    Rule(Strategy.NEW_PUTS,
         "accelerated; puts wait in the inbox; a `head_only` or `sub_queue_heads` driver "
         "(`head_only` alone for a `Consumer`'s paired take)",
         "each new task written once, leased, in one commit; its executor goes on only "
         "where statistics show no ready task in the tasks table",
         lambda f: _new_puts_static(f) and bool(f.puts_waiting)),
    Rule(Strategy.HEAD_FILES,
         "accelerated; a `head_only` driver",
         "the choice is the statistics' (no Spark job), the commit rewrites those files "
         "alone; its executor goes on only where they show the head and no change feed",
         lambda f: f.accelerated and f.head_only),
    Rule(Strategy.SUB_QUEUE_HEADS,
         f"accelerated; a `sub_queue_heads` driver that is not `head_only`; "
         f"`n` at most {COLLECT_UPTO:,}",
         "one query chooses over the files that may hold a ready task or a lease, the "
         "commit has read the whole table; its executor goes on only without a change feed",
         lambda f: f.accelerated and f.sub_queue_heads and not f.head_only
         and f.n <= COLLECT_UPTO),
    Rule(Strategy.STATEMENT,
         "not a `Consumer`'s paired take",
         "SQL alone: the portable engine's take, and every take the others turned down; "
         "an UPDATE of the id range when the chosen tasks are consecutive ids, no acks "
         "ride along and the driver is fifo-type, else a MERGE",
         lambda f: not f.paired),
)


def plan_take(facts: TakeFacts, tried: Iterable[Strategy] = ()) -> Strategy | None:
    """The first strategy of :data:`TAKE_RULES` that applies to ``facts`` and was not
    ``tried`` yet; None when none is left (the take commits nothing)."""
    done = set(tried)
    for rule in TAKE_RULES:
        if rule.strategy not in done and rule.applies(facts):
            return rule.strategy
    return None


def plan_order(facts: TakeFacts) -> list[Strategy]:
    """Every strategy a take with ``facts`` would try, in order, were each to turn
    the take down."""
    order: list[Strategy] = []
    while (strategy := plan_take(facts, order)) is not None:
        order.append(strategy)
    return order


def reads_inbox(facts: TakeFacts) -> bool:
    """Whether :attr:`TakeFacts.puts_waiting` can change the plan: only then does the
    take read the inbox's newest version before it starts."""
    return _new_puts_static(facts)


def explained(facts: TakeFacts) -> dict[str, Any]:
    """A take's plan as ``Tube.explain_take`` reports it."""
    order = plan_order(facts)
    return {"strategy": order[0].value if order else None,
            "then": [s.value for s in order[1:]],
            "facts": asdict(facts)}


def decision_table() -> str:
    """:data:`TAKE_RULES` as a Markdown table (docs/design.md holds it verbatim)."""
    rows = ["| # | strategy | applies when | why |", "| --- | --- | --- | --- |"]
    rows += [f"| {k} | `{r.strategy.value}` | {r.when} | {r.why} |"
             for k, r in enumerate(TAKE_RULES, 1)]
    return "\n".join(rows)
