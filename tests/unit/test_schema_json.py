"""A payload column added by a new tube's first ingest+take commit is nullable in
every part, as an append with ``mergeSchema`` adds it."""

from __future__ import annotations

from sparkqueue.store.txn import nullable


def test_every_field_element_and_value_of_a_schema_json_becomes_nullable() -> None:
    field = {"name": "data", "nullable": False, "metadata": {}, "type": {
        "type": "struct", "fields": [
            {"name": "n", "type": "long", "nullable": False, "metadata": {}},
            {"name": "tags", "nullable": True, "metadata": {},
             "type": {"type": "array", "elementType": "string", "containsNull": False}},
            {"name": "m", "nullable": False, "metadata": {}, "type": {
                "type": "map", "keyType": "string", "valueType": "long",
                "valueContainsNull": False}}]}}
    out = nullable(field)
    inner = out["type"]["fields"]
    assert out["nullable"] and all(f["nullable"] for f in inner)
    assert inner[1]["type"]["containsNull"] and inner[2]["type"]["valueContainsNull"]
    assert inner[0]["type"] == "long" and out["metadata"] == {}, "the rest as it was"
    assert field["nullable"] is False, "the input is not changed"
