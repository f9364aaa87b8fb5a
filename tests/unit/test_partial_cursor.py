"""Where an ingest in part leaves the cursor, and which put files hold the rows not
ingested yet. Pure logic, no JVM."""

from __future__ import annotations

from sparkqueue.engine.ingest import advanced, put_order_rows, within
from sparkqueue.store import Cursor, PutFile
from sparkqueue.store.log import write_order


def put(first: int, version: int) -> PutFile:
    return PutFile(f"part-{first}.parquet", version, first, {"now": 0.0, "pri": 0, "columns": []})


#: Puts after the cursor (version 3, next id 10): version 4 wrote rows 10-14 in
#: two files, version 6 rows 15-19 (version 5 was the sweeper's).
FILES = [put(10, 4), put(12, 4), put(15, 6)]
CURSOR = Cursor(3, 10)


def test_an_ingest_of_every_row_ends_at_the_inbox_version() -> None:
    assert advanced(CURSOR, FILES, 20, 7, 20) == Cursor(7, 20)


def test_an_ingest_in_part_keeps_the_version_it_ingested_whole() -> None:
    assert advanced(CURSOR, FILES, 20, 7, 11) == Cursor(3, 10, 1), "within the first file"
    assert advanced(CURSOR, FILES, 20, 7, 13) == Cursor(3, 10, 3), "within version 4's second"
    assert advanced(CURSOR, FILES, 20, 7, 15) == Cursor(5, 15), "version 4 whole"
    assert advanced(CURSOR, FILES, 20, 7, 17) == Cursor(5, 15, 2)
    assert Cursor(5, 15, 2).first_pending == 17


def test_the_cursor_orders_ingests_by_version_then_rows() -> None:
    versions = [c.txn_version() for c in (Cursor(3, 10), Cursor(3, 10, 1), Cursor(3, 10, 4),
                                          Cursor(5, 15), Cursor(5, 15, 2), Cursor(7, 20))]
    assert versions == sorted(set(versions))
    assert Cursor(1, 0).txn_version() > 1_000, "above the bare versions recorded before"


def test_the_files_that_hold_rows_not_ingested() -> None:
    assert within(FILES, 20, 10, 20) == FILES
    assert within(FILES, 20, 12, 20) == FILES[1:], "rows 10 and 11 ingested"
    assert within(FILES, 20, 13, 16) == FILES[1:]
    assert within(FILES, 20, 11, 12) == FILES[:1]
    assert within([], 20, 0, 20) == []


def test_a_take_in_part_takes_from_the_first_row_not_ingested() -> None:
    assert put_order_rows(FILES[1:], 20, 4, 1.0, start=13) == (13, 16)
    assert put_order_rows(FILES[1:], 20, 40, 1.0, start=13) == (13, 19)


def test_an_appends_files_come_in_the_order_they_were_written() -> None:
    names = ["part-00001-9f-c000.snappy.parquet", "part-00000-ff-c001.snappy.parquet",
             "part-00000-0a-c010.snappy.parquet", "part-00000-77-c000.snappy.parquet",
             "part-00000-12-c002.snappy.parquet"]
    assert sorted(names, key=write_order) == [names[3], names[1], names[4], names[2], names[0]]
