"""Each verb's state change (``engine.verbs``): the invariants the engine's shortcuts
rely on, checked on the table itself (``make test-fast``: no JVM)."""

from __future__ import annotations

import re

import pytest

from sparkqueue.engine import verbs
from sparkqueue.engine.verbs import Op

EVERY_OP = [verbs.ACK, verbs.DONE, verbs.BURY, verbs.KICK, verbs.DIG, verbs.DELETE,
            verbs.RELEASE_ALL, verbs.REQUEUE_CHECK, verbs.take(False), verbs.take(True),
            verbs.release(0.0, None), verbs.release(30.0, 60.0), verbs.requeue(7),
            verbs.touch(5.0)]


@pytest.mark.parametrize("op", [op for op in EVERY_OP if op.on_leases], ids=lambda op: op.name)
def test_a_verb_on_whole_leases_changes_each_row_from_that_row_alone(op: Op) -> None:
    """``engine.leased`` rewrites whole files of the caller's leases with the action
    applied to each row, with no source row to join: the action may read ``t.`` only."""
    values = " ".join((op.action or {}).values())
    assert not re.search(r"\bs\.", values), values


@pytest.mark.parametrize("op", [op for op in EVERY_OP if op.by_range], ids=lambda op: op.name)
def test_a_verb_that_may_run_as_a_range_update_only_ever_leaves_rows_stale(op: Op) -> None:
    """A range UPDATE leaves rows its condition refuses as they are: its guard may say
    nothing but Stale, and it names its owner and token by template."""
    assert set(re.findall(r"'(\w+)'", op.guard or "")) <= {"ready", "Stale"}
    assert {"{owner}", "{token}"} <= set((op.action or {}).values())


def test_release_with_a_delay_delays_the_task_and_extends_its_ttl_by_as_much() -> None:
    delayed = verbs.release(30.0, None).action or {}
    assert delayed["status"] == "'delayed'" and "30" in delayed["delay_end"]
    assert "30" in delayed["ttl_end"] and "30" in delayed["ttl"]
    ready = verbs.release(0.0, 60.0).action or {}
    assert ready["status"] == "'ready'" and ready["delay_end"] == "0.0D"
    assert ready["ttl"] == "60" or ready["ttl"].startswith("CAST(60")
    assert {ready["owner"], ready["lease_token"]} == {"NULL"}


def test_only_deleting_verbs_have_no_action_and_every_owned_verb_checks_the_owner() -> None:
    assert {op.name for op in EVERY_OP if op.action is None} == {"ack", "delete"}
    owned = [op for op in EVERY_OP if op.guard == verbs.OWNED]
    assert {op.name for op in owned} == {"ack", "done", "release", "requeue", "touch"}
    assert "NotOwner" in verbs.OWNED and "NotOwner" in (verbs.BURY.guard or "")
