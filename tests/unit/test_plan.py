"""The planners (``engine.plan``): which strategies a take, and a settling verb, try,
in order, for each kind of facts (``make test-fast``: no JVM). docs/design.md holds
their tables."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkqueue.engine.plan import (
    COLLECT_UPTO,
    SETTLE_RULES,
    Settle,
    SettleFacts,
    Strategy,
    TakeFacts,
    decision_table,
    explained,
    plan_take,
    reads_inbox,
    settle_order,
    take_order,
)

NEW, HEAD, HEADS, APART, SQL = (Strategy.NEW_PUTS, Strategy.HEAD_FILES,
                                Strategy.SUB_QUEUE_HEADS, Strategy.ACKS_APART, Strategy.STATEMENT)
FIFO = {"head_only": True, "sub_queue_heads": False}
UTUBE = {"head_only": False, "sub_queue_heads": True}
OWN = {"head_only": False, "sub_queue_heads": False}  # a driver that promises nothing


@pytest.mark.parametrize("engine, driver, n, waiting, acks, expected", [
    ("portable", FIFO, 10, True, False, [NEW, SQL]),  # an append with the ingest's txn id
    ("portable", FIFO, 10, False, False, [SQL]),
    ("portable", UTUBE, 10, True, False, [SQL]),  # no leases read in an append
    ("portable", FIFO, 10, None, True, [APART, SQL]),  # a Consumer's acks: a record's apart
    ("portable", UTUBE, 10, None, True, [APART, SQL]),
    ("accelerated", FIFO, 10, False, False, [HEAD, SQL]),
    ("accelerated", FIFO, 10, True, False, [NEW, HEAD, SQL]),
    ("accelerated", FIFO, 10, True, True, [NEW, HEAD, APART, SQL]),
    ("accelerated", UTUBE, 10, True, False, [NEW, HEADS, SQL]),
    ("accelerated", UTUBE, COLLECT_UPTO, False, False, [HEADS, SQL]),
    ("accelerated", UTUBE, COLLECT_UPTO + 1, True, False, [NEW, SQL]),
    ("accelerated", UTUBE, 10, None, True, [HEADS, APART, SQL]),  # no new puts with acks
    ("accelerated", UTUBE, COLLECT_UPTO + 1, None, True, [APART, SQL]),
    ("accelerated", OWN, 10, None, False, [SQL]),
])
def test_each_kind_of_take_tries_its_strategies_in_the_tables_order(
        engine: str, driver: dict[str, bool], n: int, waiting: bool | None, acks: bool,
        expected: list[Strategy]) -> None:
    facts = TakeFacts(engine=engine, n=n, puts_waiting=waiting, acks=acks, **driver)
    assert take_order(facts) == expected
    assert plan_take(facts) == expected[0]
    assert plan_take(facts, expected[:1]) == (expected[1] if len(expected) > 1 else None)


@pytest.mark.parametrize("facts, expected", [
    (SettleFacts("accelerated", on_leases=True), [Settle.WHOLE_FILES, Settle.STATEMENT]),
    (SettleFacts("accelerated", on_leases=True, removes=True),
     [Settle.WHOLE_FILES, Settle.STATEMENT]),
    (SettleFacts("portable", on_leases=True),  # release, touch, bury: one lease record?
     [Settle.ONE_RECORD, Settle.STATEMENT]),
    (SettleFacts("portable", on_leases=True, removes=True, one=True),
     [Settle.ONE_RECORD, Settle.ONE_TASK, Settle.STATEMENT]),
    (SettleFacts("portable", on_leases=True, removes=True),  # a batch: one lease record?
     [Settle.ONE_RECORD, Settle.STATEMENT]),
    (SettleFacts("portable", on_leases=True, one=True),  # release of one
     [Settle.ONE_RECORD, Settle.STATEMENT]),
    (SettleFacts("portable", on_leases=True, value=True), [Settle.STATEMENT]),
    (SettleFacts("accelerated", on_leases=False), [Settle.STATEMENT]),  # delete, dig, ...
    (SettleFacts("accelerated", on_leases=True, listed=False), [Settle.STATEMENT]),
    (SettleFacts("accelerated", on_leases=True, value=True), [Settle.STATEMENT]),  # done
])
def test_each_settling_verb_tries_files_only_where_they_can_be_its_tasks(
        facts: SettleFacts, expected: list[Settle]) -> None:
    assert settle_order(facts) == expected
    assert settle_order(facts)[-1] is Settle.STATEMENT  # what settle() relies on


def test_the_inbox_is_read_only_where_waiting_puts_can_change_the_plan() -> None:
    assert reads_inbox(TakeFacts("accelerated", n=1, **FIFO))
    assert reads_inbox(TakeFacts("accelerated", n=1, **UTUBE))
    assert not reads_inbox(TakeFacts("accelerated", n=1, acks=True, **UTUBE))
    assert reads_inbox(TakeFacts("accelerated", n=1, acks=True, **FIFO))
    assert not reads_inbox(TakeFacts("accelerated", n=1, **OWN))
    assert reads_inbox(TakeFacts("portable", n=1, **FIFO))
    assert not reads_inbox(TakeFacts("portable", n=1, acks=True, **FIFO))
    assert not reads_inbox(TakeFacts("portable", n=1, **UTUBE))


def test_an_explanation_names_the_first_strategy_the_fallbacks_and_the_facts() -> None:
    said = explained(TakeFacts("accelerated", n=5, puts_waiting=True, **FIFO))
    assert said["strategy"] == "new-puts" and said["then"] == ["head-files", "update-or-merge"]
    assert said["facts"]["puts_waiting"] is True and said["facts"]["n"] == 5


def test_docs_design_holds_the_planners_table_as_the_code_has_it() -> None:
    design = (Path(__file__).resolve().parents[2] / "docs" / "design.md").read_text()
    assert decision_table() in design, "docs/design.md's take table differs from engine.plan"
    assert decision_table(SETTLE_RULES) in design, (
        "docs/design.md's settle table differs from engine.plan")
