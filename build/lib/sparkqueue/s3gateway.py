"""A local S3-compatible server: versitygw's posix gateway on 127.0.0.1, for the tests,
the benchmark and trying an S3 root without a cloud account.

versitygw keeps each bucket as a folder and each object as a file, honours
conditional writes (``If-None-Match: *``) as S3 does, and starts in under a
second. ``make test`` builds it once into the venv (``go install``, see the
Makefile); a missing binary fails the tests that need it, naming the command.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from pathlib import Path
from types import TracebackType

from .server import free_port

VERSITYGW = "github.com/versity/versitygw/cmd/versitygw@v1.8.0"


def binary() -> Path:
    """The versitygw the set-up built (beside this venv's python)."""
    import sys

    found = Path(sys.executable).parent / "versitygw"
    if not found.is_file():
        raise RuntimeError(f"{found} is missing: `make test` builds it "
                           f"(GOBIN=.venv/bin go install {VERSITYGW})")
    return found


class S3Gateway:
    """versitygw serving ``folder`` on a free port, with one bucket; a context manager.

    :attr:`env` is the AWS environment a client of it uses (what
    ``sparkqueue.session(root=...)`` reads), :meth:`root` an ``s3a://`` root in
    its bucket.
    """

    def __init__(self, folder: Path, bucket: str = "queues") -> None:
        self.folder, self.bucket = folder, bucket
        self.port = free_port()
        self.access, self.secret = "sparkqueue", uuid.uuid4().hex
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        return {"AWS_ACCESS_KEY_ID": self.access, "AWS_SECRET_ACCESS_KEY": self.secret,
                "AWS_ENDPOINT_URL": self.url, "AWS_REGION": "us-east-1"}

    def root(self, prefix: str) -> str:
        return f"s3a://{self.bucket}/{prefix}"

    def __enter__(self) -> S3Gateway:
        (self.folder / self.bucket).mkdir(parents=True, exist_ok=True)  # posix: a bucket
        log = open(self.folder.parent / f"versitygw-{self.port}.log", "wb")  # noqa: SIM115
        self.process = subprocess.Popen(
            [str(binary()), "--port", f"127.0.0.1:{self.port}", "posix", str(self.folder)],
            stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "ROOT_ACCESS_KEY": self.access, "ROOT_SECRET_KEY": self.secret})
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                pass
            try:  # a tenth of a second for it to listen, or news that it exited
                self.process.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                continue
            raise RuntimeError(f"versitygw exited ({self.process.returncode}): see {log.name}")
        self.__exit__(None, None, None)
        raise RuntimeError(f"versitygw did not listen on {self.url} within 30 s")

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
