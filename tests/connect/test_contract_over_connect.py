"""The contract suite (tests/contract) over Spark Connect: the same tests, with the
fixtures of tests/connect/conftest.py."""

import pytest

from ..contract.test_lifecycle import *  # noqa: F403

# one test worker holds the Connect server (pytest -n --dist loadgroup)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("connect")]
