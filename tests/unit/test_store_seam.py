"""The store seam (docs/design.md, "Two engines, one seam"): outside ``sparkqueue/store``
no code reaches the JVM or sets a Delta writer or reader option."""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "sparkqueue"
#: a JVM handle, or a Delta option's name as a string the code passes
STORE_ONLY = re.compile(r"import py4j|from py4j|_jvm\b|_jdf\b|_jsparkSession|"
                        r"\"(txnAppId|txnVersion|mergeSchema|readChangeFeed)\"")


def test_no_module_outside_store_reaches_the_jvm_or_sets_delta_options() -> None:
    found = [f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}"
             for path in sorted(PACKAGE.rglob("*.py")) if "store" not in path.parts
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if STORE_ONLY.search(line)]
    assert found == [], found
