"""sparkqueue's benchmarks: ``python -m bench`` runs them (``make bench`` writes
BENCHMARKS.md from one run); ``python -m bench.<section>`` runs one section alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: The repository's root. A benchmark's worker processes run ``python -m bench.<module>``
#: from it, so that this package is found whichever venv's Python runs them.
REPO = Path(__file__).resolve().parent.parent


def emit(figures: dict[str, Any], json_path: str | None) -> None:
    """Print a section's figures, one a line, and write them to ``json_path`` as JSON
    when it is given (a section run alone, or a worker answering its parent)."""
    for key, value in figures.items():
        print(f"  {key:<44} {value:.3f}" if isinstance(value, float) else f"  {key:<44} {value}")
    if json_path:
        with open(json_path, "w") as out:
            json.dump(figures, out, indent=2)
