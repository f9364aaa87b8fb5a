"""Catalog tubes (tests/test_catalog.py) as a Spark Connect client runs them."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from sparkqueue import FakeClock

from ..test_catalog import walk_a_catalog_tube


@pytest.mark.main_line_only
def test_a_catalog_tube_over_connect(spark: SparkSession, clock: FakeClock) -> None:
    walk_a_catalog_tube(spark, None, clock)
