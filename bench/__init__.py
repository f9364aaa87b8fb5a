"""sparkqueue's benchmarks: ``python -m bench`` runs them (``make bench`` writes
BENCHMARKS.md from one run); ``python -m bench.<section>`` runs one section alone."""

from pathlib import Path

#: The repository's root. A benchmark's worker processes run ``python -m bench.<module>``
#: from it, so that this package is found whichever venv's Python runs them.
REPO = Path(__file__).resolve().parent.parent
