"""The local S3 server the object-store tests share within a module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sparkqueue.s3gateway import S3Gateway


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Gateway]:
    with S3Gateway(tmp_path_factory.mktemp("s3") / "objects") as g:
        yield g
