"""Notebooks run top to bottom on the local Spark, so none can rot."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.py"))


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(notebook: Path, spark: SparkSession, tmp_path: Path,
                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTEBOOK_ROOT", str(tmp_path / "queues"))
    runpy.run_path(str(notebook), run_name="__main__")
