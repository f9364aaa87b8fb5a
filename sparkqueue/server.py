"""A local Spark Connect server with Delta, from the installed pyspark's own jars.

For trying sparkqueue the way Databricks notebooks and Databricks Connect
reach Spark (a Spark Connect client), and for the tests that do. It runs
``spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer``
with Delta's package and SQL extension, on 127.0.0.1.

    python -m sparkqueue.server --port 15002      # then SPARK_REMOTE=sc://127.0.0.1:15002
    python -m sparkqueue.server --s3              # clients' roots on S3 (AWS_* variables)
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

import pyspark

from . import objectstore
from .config import load_config
from .errors import QueueError
from .session import delta_package
from .store import lines

__all__ = ["ConnectServer"]

CONNECT_SERVER = "org.apache.spark.sql.connect.service.SparkConnectServer"


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ConnectServer:
    """One Spark Connect server process; :attr:`url` is what ``SPARK_REMOTE`` takes.

    ``conf``: more Spark settings for the server (``spark.driver.memory``,
    ``spark.master``, ...), over conf/sparkqueue.toml's ``[spark]`` ones.
    ``log``: where its output goes (a file beside the working directory by
    default). ``s3``: an AWS environment (``AWS_ENDPOINT_URL``, keys, region)
    for a server whose clients' roots are on S3: it gets S3A and sparkqueue's
    log store, as :func:`sparkqueue.session` gives a session for an S3 root.
    A context manager: started on entry, stopped on exit.
    """

    def __init__(self, port: int | None = None, conf: dict[str, str] | None = None,
                 log: str | Path | None = None, s3: Mapping[str, str] | None = None) -> None:
        self.port = port or free_port()
        self.packages = [delta_package(), lines.installed().connect_package()]
        self.conf = {
            "spark.master": "local[2]",
            "spark.ui.enabled": "false",
            # conf/'s [spark] settings, as sparkqueue.session() gives a local session
            **load_config().spark,
            "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
            "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            # this Python (which has sparkqueue) runs the server's Python workers:
            # a streaming sink's foreachBatch function runs in one
            "spark.pyspark.python": sys.executable,
        }
        if s3 is not None:  # S3's settings as a local session's (conf/'s spark.jars kept)
            self.conf, more = objectstore.session_settings(
                lines.installed().delta_release(), s3, self.conf)
            self.packages += more
        self.conf.update(conf or {})
        self.log = Path(log or f"spark-connect-{self.port}.log")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
        args = [str(submit), "--class", CONNECT_SERVER,
                "--packages", ",".join(p for p in self.packages if p)]
        for key, value in self.conf.items():
            args += ["--conf", f"{key}={value}"]
        return args

    def start(self, timeout: float = 300.0) -> ConnectServer:
        """Start the server; return once it accepts connections (or raise, with its log)."""
        env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1")
        env.pop("SPARK_REMOTE", None)
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT,
                                            env=env, start_new_session=True)
        until = time.monotonic() + timeout
        while time.monotonic() < until:
            if self.process.poll() is not None:
                break
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self
            except OSError:
                time.sleep(0.5)
        tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
        self.stop()
        raise QueueError(f"the Spark Connect server did not start on port {self.port} "
                         f"(log {self.log}):\n{tail}")

    def stop(self) -> None:
        """Stop the server and the JVM it started."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def __enter__(self) -> ConnectServer:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=15002)
    parser.add_argument("--s3", action="store_true",
                        help="for roots on S3: S3A and sparkqueue's log store, with the "
                             "endpoint and keys of this environment's AWS_* variables")
    args = parser.parse_args(argv)
    server = ConnectServer(args.port, s3=os.environ if args.s3 else None)
    # The server's JVM runs in a process group of its own, which a signal to this
    # process does not reach: SIGTERM (``kill``, a supervisor's stop) ends this
    # process as Ctrl-C does, and either way the JVM is stopped with it.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        server.start()
        print(f"Spark Connect with Delta at {server.url} (log {server.log}); Ctrl-C or "
              "SIGTERM stops it", flush=True)
        assert server.process is not None
        server.process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
