"""A payload column added to a new tube's tasks table (by its first put, or else its first
ingest) is nullable in every part, as an append with ``mergeSchema`` adds it."""

from __future__ import annotations

from pyspark.sql import types as T

from sparkqueue.store import nullable
from sparkqueue.store.sql import sql_type


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


def test_a_payload_type_is_spelled_for_sql_with_every_field_name_quoted() -> None:
    kind = T.StructType([
        T.StructField("n", T.LongType(), False),
        T.StructField("odd `name`", T.ArrayType(T.DecimalType(10, 2))),
        T.StructField("m", T.MapType(T.StringType(), T.StructType([
            T.StructField("at", T.TimestampType())]))),
    ])
    assert sql_type(kind) == (
        "STRUCT<`n`: bigint, `odd ``name```: ARRAY<decimal(10,2)>, "
        "`m`: MAP<string, STRUCT<`at`: timestamp>>>")
