"""When a take of new puts knows, from the puts' commit tags alone, which tasks a
head-only driver takes: the first ones in put order. Pure logic, no JVM."""

from __future__ import annotations

from typing import Any

from sparkqueue.engine.ingest import put_order_rows
from sparkqueue.store import PutFile

NOW = 100.0


def put(first: int, **tag: Any) -> PutFile:
    """A put file whose first row is ``first``, its tag ``tag`` over plain defaults."""
    return PutFile(f"part-{first}.parquet", 1, first, {"now": 50.0, "pri": 0, "columns": [],
                                                       **tag})


def test_puts_that_agree_give_their_first_rows() -> None:
    puts = [put(10), put(13, ttl=60.0)]
    assert put_order_rows(puts, 15, 4, NOW) == (10, 13)
    assert put_order_rows(puts, 15, 100, NOW) == (10, 14), "fewer than n: all of them"
    assert put_order_rows([put(10, delay=0.0)], 11, 1, NOW) == (10, 10)


def test_puts_that_differ_or_hide_options_in_their_rows_are_read() -> None:
    assert put_order_rows([], 0, 4, NOW) is None
    assert put_order_rows([put(0), put(3, pri=-1)], 5, 4, NOW) is None, "an urgent put"
    assert put_order_rows([put(0, delay=5.0)], 3, 1, NOW) is None
    assert put_order_rows([put(0, ttl=50.0)], 3, 1, NOW) is None, "its ttl ended at 100"
    assert put_order_rows([put(0, columns=["pri"])], 3, 1, NOW) is None
    assert put_order_rows([put(0, columns=None)], 3, 1, NOW) is None
    legacy = PutFile("part-0.parquet", 1, 0, {"now": 50.0, "pri": 0})
    assert put_order_rows([legacy], 3, 1, NOW) is None, "a tag from before: rows unknown"
