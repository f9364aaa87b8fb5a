"""Object storage roots: S3 through Hadoop's S3A, set up from the standard AWS environment.

A queue root on S3 (``s3a://bucket/prefix``; ``s3://`` is taken as s3a) needs
Hadoop's S3A connector, ``hadoop-aws`` of the Hadoop version pyspark bundles,
on the session's class path, and S3A settings. :func:`sparkqueue.session`
adds both when the root it is built for is on S3, reading what AWS tools
read:

- ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` and ``AWS_SESSION_TOKEN``
  (without them, S3A's own chain: instance profiles, web identity, ...);
- ``AWS_REGION`` (or ``AWS_DEFAULT_REGION``);
- ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL``, for an S3-compatible
  server: path-style requests, plain http when the URL says so.

A session the caller built is used as it is: its settings are the caller's.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from .errors import InvalidOption, QueueError, StorageError
from .store.lines import conditional_puts, spark_jars

__all__ = ["is_s3", "s3a_root", "hadoop_version", "hadoop_aws_package", "s3a_settings",
           "session_settings", "unreachable", "log_store_args", "log_store_jar", "warn_if_unsafe",
           "LOG_STORE"]

#: The URI schemes of S3 roots; all are read through S3A.
S3_SCHEMES = ("s3a", "s3")
#: What S3A settings are named as Spark settings.
HADOOP = "spark.hadoop.fs.s3a."
#: S3A's credentials provider for keys with a session token.
TEMPORARY_CREDENTIALS = "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"
#: The region S3A asks for when a custom endpoint names none (S3-compatible
#: servers take any; the AWS SDK needs one).
DEFAULT_REGION = "us-east-1"


def scheme(root: str) -> str:
    """The URI scheme of ``root``, lower case ('' for a plain path or a catalog name)."""
    match = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)://", root)
    return match.group(1).lower() if match else ""


def is_s3(root: str) -> bool:
    """Whether ``root`` is on S3 (``s3a://`` or ``s3://``)."""
    return scheme(root) in S3_SCHEMES


def s3a_root(root: str) -> str:
    """``root`` as S3A reads it: ``s3://b/p`` is ``s3a://b/p``; any other root as it is.

    Delta picks its log store by the scheme, and Hadoop its file system:
    one scheme for S3 keeps both on S3A."""
    if scheme(root) == "s3":
        return "s3a" + root[len("s3"):]
    return root


def hadoop_version(jars: Path | None = None) -> str:
    """The Hadoop version pyspark bundles (from its ``hadoop-client-api`` jar)."""
    if jars is None:
        jars = spark_jars()
    for jar in sorted(jars.glob("hadoop-client-api-*.jar")):
        return jar.name.removeprefix("hadoop-client-api-").removesuffix(".jar")
    raise QueueError(f"no hadoop-client-api jar in {jars}: pyspark's install lacks its "
                     "Hadoop, which S3 roots need")


def hadoop_aws_package(jars: Path | None = None) -> str:
    """The Maven coordinate of S3A for the bundled Hadoop (it must match exactly)."""
    return f"org.apache.hadoop:hadoop-aws:{hadoop_version(jars)}"


def s3a_settings(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Spark settings for S3A from the AWS environment ``env`` (default: this process's).

    Keys go in only as a pair (with the session token when there is one);
    a partial pair is an :class:`InvalidOption` naming what is missing, not a
    failure at the first request.
    """
    env = os.environ if env is None else env
    settings: dict[str, str] = {}
    key, secret = env.get("AWS_ACCESS_KEY_ID"), env.get("AWS_SECRET_ACCESS_KEY")
    if bool(key) != bool(secret):
        missing = "AWS_SECRET_ACCESS_KEY" if key else "AWS_ACCESS_KEY_ID"
        raise InvalidOption(f"S3 credentials: {missing} is not set, but its pair is; set "
                            "both, or neither to use S3A's own credential chain")
    if key and secret:
        settings[f"{HADOOP}access.key"] = key
        settings[f"{HADOOP}secret.key"] = secret
        token = env.get("AWS_SESSION_TOKEN")
        if token:
            settings[f"{HADOOP}session.token"] = token
            settings[f"{HADOOP}aws.credentials.provider"] = TEMPORARY_CREDENTIALS
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        url = urlparse(endpoint)
        if url.scheme not in ("http", "https") or not url.netloc:
            raise InvalidOption(f"S3 endpoint {endpoint!r} (AWS_ENDPOINT_URL) must be an "
                                "http:// or https:// URL with a host")
        settings[f"{HADOOP}endpoint"] = endpoint
        settings[f"{HADOOP}path.style.access"] = "true"
        settings[f"{HADOOP}connection.ssl.enabled"] = str(url.scheme == "https").lower()
        region = region or DEFAULT_REGION
    if region:
        settings[f"{HADOOP}endpoint.region"] = region
    return settings


#: What S3A's failures to reach a root say, and what to tell the user for each.
NO_S3A = ("Hadoop's S3A connector is not on the session's class path: build the session "
          "with sparkqueue.session(root=...), or add {package} to spark.jars.packages")
FAILURES = (
    ("S3AFileSystem not found", NO_S3A),
    ("ClassNotFoundException: org.apache.hadoop.fs.s3a.S3AFileSystem", NO_S3A),
    ("No FileSystem for scheme", "no file system serves this scheme: add {package} to "
     "spark.jars.packages, or build the session with sparkqueue.session(root=...)"),
    ("NoSuchBucket", "the bucket does not exist"),
    ("UnknownStoreException", "the bucket does not exist"),
    ("AccessDenied", "access denied: check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and "
     "AWS_SESSION_TOKEN, and the bucket's policy"),
    ("InvalidAccessKeyId", "the access key is not known: check AWS_ACCESS_KEY_ID"),
    ("SignatureDoesNotMatch", "the secret key does not match: check AWS_SECRET_ACCESS_KEY"),
    ("Unable to execute HTTP request", "the S3 endpoint cannot be reached: check "
     "AWS_ENDPOINT_URL and AWS_REGION"),
)


def unreachable(root: str, e: BaseException) -> StorageError | None:
    """The typed error for a failure to reach the S3 root ``root`` (None: ``e`` is
    not one), naming the root and the likely fix instead of a Java stack."""
    if not is_s3(root):
        return None
    text = str(e)
    for marker, problem in FAILURES:
        if marker in text:
            return StorageError(root, problem.format(package=hadoop_aws_package()))
    return None


#: sparkqueue's Delta log store for S3 (sparkqueue/java/): commits by conditional PUT
LOG_STORE = "sparkqueue.delta.ConditionalPutLogStore"
JAVA_SOURCE = Path(__file__).parent / "java" / "sparkqueue" / "delta" / \
    "ConditionalPutLogStore.java"
#: where the compiled log store is kept: beside the package, or in the user's cache
JAR_NAME = "sparkqueue-delta-logstore.jar"
MAVEN = "https://repo1.maven.org/maven2"


def log_store_jar(delta_version: str, cache: Path | None = None) -> Path:
    """The jar of :data:`LOG_STORE`, compiled with the JDK's ``javac`` on first use.

    It compiles against Delta's ``delta-storage`` jar of ``delta_version``
    (from the Ivy cache where Spark keeps Delta's packages, else fetched
    from Maven Central) and the Hadoop pyspark bundles. Kept in ``cache``
    (default: ``sparkqueue/jars`` when writable, else ``~/.cache/sparkqueue``)
    and rebuilt when the source is newer.
    """
    cache = cache or _jar_cache()
    jar = cache / f"{delta_version}-{JAR_NAME}"
    if jar.is_file() and jar.stat().st_mtime >= JAVA_SOURCE.stat().st_mtime:
        return jar
    java_home = os.environ.get("JAVA_HOME")
    javac = (str(Path(java_home) / "bin" / "javac") if java_home
             and (Path(java_home) / "bin" / "javac").is_file() else shutil.which("javac"))
    if javac is None:
        raise QueueError("javac was not found: S3 roots need sparkqueue's Delta log store, "
                         "compiled once with a Java 17 JDK (apt-get install "
                         "openjdk-17-jdk-headless; set JAVA_HOME)")
    classpath = [str(_delta_storage(delta_version, cache)),
                 *[str(j) for j in spark_jars().glob("hadoop-client-api-*.jar")]]
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([javac, "--release", "17", "-nowarn", "-d", out, "-cp",
                        os.pathsep.join(classpath), str(JAVA_SOURCE)],
                       check=True, capture_output=True, text=True)
        partial = jar.with_suffix(f".{os.getpid()}.zip")
        shutil.make_archive(str(partial.with_suffix("")), "zip", out)
        partial.replace(jar)  # whole or not at all, for concurrent first uses
    return jar


def _jar_cache() -> Path:
    here = Path(__file__).parent / "jars"
    try:
        here.mkdir(exist_ok=True)
        if os.access(here, os.W_OK):
            return here
    except OSError:
        pass
    home = Path.home() / ".cache" / "sparkqueue"
    home.mkdir(parents=True, exist_ok=True)
    return home


def _delta_storage(version: str, cache: Path) -> Path:
    """Delta's ``delta-storage`` jar of ``version``: the Ivy cache's, or Maven Central's."""
    name = f"io.delta_delta-storage-{version}.jar"
    for ivy in sorted(Path.home().glob(".ivy2*/jars"), reverse=True):
        if (ivy / name).is_file():
            return ivy / name
    fetched = cache / name
    if not fetched.is_file():
        url = f"{MAVEN}/io/delta/delta-storage/{version}/delta-storage-{version}.jar"
        try:
            with urllib.request.urlopen(url, timeout=60) as answer:
                data = answer.read()
        except OSError as e:
            raise QueueError(f"could not fetch {url} (to compile sparkqueue's Delta log "
                             f"store for S3): {e}") from e
        partial = fetched.with_suffix(f".{os.getpid()}")
        partial.write_bytes(data)
        partial.replace(fetched)
    return fetched


def session_settings(delta_version: str, env: Mapping[str, str] | None = None,
                     settings: Mapping[str, str] | None = None,
                     ) -> tuple[dict[str, str], list[str]]:
    """What a new session needs for S3 roots: ``settings`` with S3A's from ``env``
    and sparkqueue's log store for s3a and s3, its jar joined to any
    ``spark.jars`` there (where pyspark's Hadoop makes conditional PUTs); and
    the packages to add. One place for both a local session's settings and a
    Spark Connect server's."""
    merged = {**(settings or {}), **s3a_settings(env)}
    jar = log_store_args(delta_version)
    if jar:
        merged["spark.jars"] = ",".join(j for j in (merged.get("spark.jars"), jar[1]) if j)
        for name in S3_SCHEMES:
            merged[f"spark.delta.logStore.{name}.impl"] = LOG_STORE
    return merged, [hadoop_aws_package()]


def log_store_args(delta_version: str) -> list[str]:
    """spark-submit's ``--jars`` of sparkqueue's log store for Delta ``delta_version``
    (compiled now if it is not yet); none where pyspark's Hadoop cannot make the
    conditional PUTs it commits with (Delta's default log store then serves,
    safe with one writing application: :func:`warn_if_unsafe` says so)."""
    if not conditional_puts(hadoop_version()):
        return []
    return ["--jars", str(log_store_jar(delta_version))]


#: Log stores that keep commits to S3 from several writers apart.
SAFE_LOG_STORES = (LOG_STORE, "io.delta.storage.S3DynamoDBLogStore")
_warned: set[str] = set()


def warn_if_unsafe(root: str, spark: Any) -> None:
    """Warn once per root when a Queue on S3 runs on a session (``spark``) whose
    Delta log store for the root's scheme can lose a commit to another writer.
    Databricks coordinates S3 commits itself: no warning there."""
    if not is_s3(root) or root in _warned or os.environ.get("DATABRICKS_RUNTIME_VERSION"):
        return
    log_store = spark.conf.get(f"spark.delta.logStore.{scheme(root)}.impl", None)
    if log_store in SAFE_LOG_STORES:
        return
    _warned.add(root)
    import warnings

    store = log_store or "Delta's default, S3SingleDriverLogStore"
    hadoop = hadoop_version()
    fix = (f"Build the session with sparkqueue.session(root=...), which sets "
           f"spark.delta.logStore.s3a.impl to {LOG_STORE}" if conditional_puts(hadoop) else
           f"This Hadoop ({hadoop}) cannot make the conditional PUTs that {LOG_STORE} "
           "commits with (Hadoop 3.4.2 and later can: Spark 4.1 and later bundle it); "
           "keep to one writing application, or use Delta's S3DynamoDBLogStore")
    warnings.warn(
        f"{root}: this session's Delta log store for s3a ({store}) keeps commits "
        "apart inside one Spark application "
        "only: two applications writing these tubes can lose a commit (a put, an ack, "
        f"or a lease given twice). {fix}.",
        RuntimeWarning, stacklevel=3)
