"""The plans of the take and of the verbs that settle tasks: which strategy is tried
first, and which after, from facts known before any task is read. Pure: no
Spark, no JVM (``make test-fast``).

A take (:func:`sparkqueue.engine.take.take_once`) gathers :class:`TakeFacts`,
asks :func:`plan_take` for a strategy and runs that strategy's executor. An
executor checks its premise again inside its own transaction (the file
statistics of its snapshot, the puts' tags, a conflict): where it does not
hold, the executor commits nothing and the take asks for the next strategy,
the ones tried left out. :data:`TAKE_RULES` is the table, in order;
:func:`decision_table` writes it as docs/design.md shows it, and
``Tube.explain_take`` reports a take's plan without taking anything.

A settling verb on the caller's own leases (ack, release, touch, bury) plans
alike: :class:`SettleFacts`, :data:`SETTLE_RULES`, :func:`settle_order` (whole
files where they may be its tasks, or the portable engine's one commit on a
lease record or one statement on one removed task, then the statement, which
never turns a verb down).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Strategy", "TakeFacts", "Rule", "TAKE_RULES", "COLLECT_UPTO", "plan_take",
           "take_order", "reads_inbox", "explained", "decision_table", "Settle",
           "SettleFacts", "SETTLE_RULES", "settle_order"]

#: Choices of at most this many tasks are collected to the driver (one Spark job less);
#: a take of sub-queue heads leases at most this many.
COLLECT_UPTO = 10_000


class Strategy(enum.Enum):
    """How a take commits; the value is what its commit's tag names (``plan``)."""

    #: one append to the tasks table: the puts not yet ingested, the chosen ones
    #: leased (accelerated: a lease record, when their tags settle the choice and it
    #: leases every task it ingests) (``engine.fresh``)
    NEW_PUTS = "new-puts"
    #: the data files that file statistics show hold the ``n`` lowest ready tasks,
    #: rewritten in one commit with the leased rows in files of their own
    HEAD_FILES = "head-files"
    #: the heads of free sub-queues chosen in one query over the snapshot's files that
    #: may hold a ready task or a lease; their files rewritten in one commit
    SUB_QUEUE_HEADS = "sub-queue-heads"
    #: the acks riding along committed first, alone, by :data:`Settle.WHOLE_FILES` or
    #: :data:`Settle.ONE_RECORD`; then the take planned again without them
    ACKS_APART = "acks-apart"
    #: an ingest, then one UPDATE of an id range (when the chosen tasks are
    #: consecutive ids) or one MERGE of the choice (``engine.ops.apply``)
    STATEMENT = "update-or-merge"


@dataclass(frozen=True)
class TakeFacts:
    """What a take knows before it reads any task.

    ``engine``: ``accelerated`` or ``portable`` (whether the store commits
    chosen files); ``head_only`` and ``sub_queue_heads``: the driver's
    promises (it looks only at the lowest ready tasks; at the heads of free
    sub-queues); ``puts_waiting``: whether the inbox holds puts not ingested
    yet (None: not asked, see :func:`reads_inbox`); ``n``: how many;
    ``acks``: a Consumer's previous batch is acked by the take's commit.
    """

    engine: str
    head_only: bool
    sub_queue_heads: bool
    n: int
    puts_waiting: bool | None = None
    acks: bool = False

    @property
    def accelerated(self) -> bool:
        return self.engine == "accelerated"


@dataclass(frozen=True)
class Rule:
    """One row of a table: a strategy, when it applies (``when``: words for the
    docs; ``applies``: the test, on the table's facts) and why it goes there."""

    strategy: enum.Enum
    when: str
    why: str
    applies: Callable[[Any], bool]


def _new_puts_static(f: TakeFacts) -> bool:
    if not f.accelerated:  # an append alone: no acks' files removed, no leases read
        return f.head_only and not f.acks
    return f.head_only or (f.sub_queue_heads and not f.acks)


TAKE_RULES: tuple[Rule, ...] = (
    Rule(Strategy.NEW_PUTS,
         "puts wait in the inbox; a `head_only` driver (portable: with no acks riding "
         "along), or, accelerated, a `sub_queue_heads` one with no acks riding along",
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
    Rule(Strategy.ACKS_APART,
         "acks ride along",
         "acks that are whole files (portable: one lease record) cost no data read alone, "
         "where riding the statement would have its MERGE read them, and the take planned "
         "again may then take new puts; its executor goes on only where they are such files",
         lambda f: bool(f.acks)),
    Rule(Strategy.STATEMENT,
         "always",
         "SQL alone: the portable engine's take, and every take the others turned down; "
         "an UPDATE of the id range when the chosen tasks are consecutive ids, no acks "
         "ride along and the driver is fifo-type, else a MERGE (with the acks)",
         lambda f: True),
)


def _first(rules: tuple[Rule, ...], facts: Any, tried: Iterable[enum.Enum]) -> Any:
    done = set(tried)
    return next((r.strategy for r in rules if r.strategy not in done and r.applies(facts)),
                None)


def plan_take(facts: TakeFacts, tried: Iterable[Strategy] = ()) -> Strategy | None:
    """The first strategy of :data:`TAKE_RULES` that applies to ``facts`` and was not
    ``tried`` yet; None when none is left."""
    return _first(TAKE_RULES, facts, tried)  # type: ignore[no-any-return]


def _order(rules: tuple[Rule, ...], facts: Any) -> list[Any]:
    order: list[Any] = []
    while (strategy := _first(rules, facts, order)) is not None:
        order.append(strategy)
    return order


def take_order(facts: TakeFacts) -> list[Strategy]:
    """Every strategy a take with ``facts`` would try, in order, were each to turn
    it down."""
    return _order(TAKE_RULES, facts)


def reads_inbox(facts: TakeFacts) -> bool:
    """Whether :attr:`TakeFacts.puts_waiting` can change the plan: only then does the
    take read the inbox's newest version before it starts."""
    return _new_puts_static(facts)


def explained(facts: TakeFacts) -> dict[str, Any]:
    """A take's plan as ``Tube.explain_take`` reports it."""
    order = take_order(facts)
    return {"strategy": order[0].value if order else None,
            "then": [s.value for s in order[1:]],
            "facts": asdict(facts)}


def decision_table(rules: tuple[Rule, ...] | None = None) -> str:
    """A table of rules (:data:`TAKE_RULES` by default) in Markdown, as
    docs/design.md holds it verbatim."""
    rows = ["| # | strategy | applies when | why |", "| --- | --- | --- | --- |"]
    rows += [f"| {k} | `{r.strategy.value}` | {r.when} | {r.why} |"
             for k, r in enumerate(TAKE_RULES if rules is None else rules, 1)]
    return "\n".join(rows)


class Settle(enum.Enum):
    """How a settling verb commits; the value is what its commit's tag names (``plan``)."""

    #: the named tasks fill whole data files of the caller's live leases: those files
    #: removed (ack) or rewritten with the verb's SET, in one commit that joins
    #: nothing (``engine.leased``)
    WHOLE_FILES = "whole-files"
    #: an ack or a delete of one task: one DELETE of its row where the caller holds
    #: its live lease; a DELETE of one row is all or nothing (``engine.settle``)
    ONE_TASK = "one-task"
    #: a verb on the tasks of one lease record: one appended settle row that closes it
    #: (an ack or a delete), or one MERGE that replaces it by its tasks with the verb's SET,
    #: where the caller's lease holds; its row is the whole lease (``engine.settle``)
    ONE_RECORD = "one-record"
    #: one MERGE of the named tasks; its guards say what is wrong (``engine.ops``)
    STATEMENT = "merge"


@dataclass(frozen=True)
class SettleFacts:
    """What a settling verb knows before it reads any task.

    ``engine``: as :class:`TakeFacts`'; ``on_leases``: the verb's guard passes
    on every task the caller holds with a live lease and its SET reads only the
    task's own row (``Op.on_leases``: ack, release, touch, bury); ``listed``:
    the tasks are a list of ids (a DataFrame of ids too many to collect is
    joined); ``value``: the verb writes a value of the caller's (``done``);
    ``removes``: the verb removes the tasks (an ack); ``one``: it names one task."""

    engine: str
    on_leases: bool
    listed: bool = True
    value: bool = False
    removes: bool = False
    one: bool = False


SETTLE_RULES: tuple[Rule, ...] = (
    Rule(Settle.WHOLE_FILES,
         "accelerated; a verb on the caller's own leases; ids listed; no value written",
         "a take writes the tasks it leases into files of their own, so a batch acked as "
         "taken is whole files: removed reading no data; its executor goes on only where "
         "file statistics show them so, with no change feed",
         lambda f: f.engine == "accelerated" and f.on_leases and f.listed and not f.value),
    Rule(Settle.ONE_RECORD,
         "portable; a verb on the caller's own leases; ids listed; no value written",
         "a take of new puts leases them by one row, a lease record, in a file of its own "
         "(`engine.records`): an appended settle row that closes it (on a table made "
         "before those, a DELETE of its row), or a MERGE that replaces it by its "
         "tasks with the verb's SET, changes all of them or none, in one commit; its "
         "executor goes on only where the tasks are one record's this process wrote "
         "down, the caller's, with lease and ttl running",
         lambda f: f.engine == "portable" and f.on_leases and f.listed and not f.value),
    Rule(Settle.ONE_TASK,
         "portable; an ack or a delete of one task",
         "a DELETE whose condition holds the guard deletes the row or nothing: all or "
         "nothing, with no join and no source; deleting nothing, it commits nothing, "
         "and the MERGE acks the task or says why not (a DELETE of several rows "
         "could delete some: Delta's SQL cannot name the files a choice saw)",
         lambda f: f.engine == "portable" and f.on_leases and f.removes and f.one),
    Rule(Settle.STATEMENT,
         "always",
         "every verb and every case: the guards refuse what must not change",
         lambda f: True),
)


def settle_order(facts: SettleFacts) -> list[Settle]:
    """Every strategy a settling verb with ``facts`` would try, in order; the last is
    always :attr:`Settle.STATEMENT`."""
    return _order(SETTLE_RULES, facts)
