"""S3 roots and S3A settings from the AWS environment: pure logic, no JVM (``make test-fast``)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from sparkqueue import InvalidOption, QueueError, StorageError, objectstore
from sparkqueue.objectstore import HADOOP

KEYS = {"AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "SECRET"}


@pytest.mark.parametrize("root, s3", [
    ("s3a://bucket/q", True), ("s3://bucket/q", True), ("S3A://bucket/q", True),
    ("/data/queues", False), ("file:///data/q", False), ("main.queues", False),
    ("gs://bucket/q", False), ("./s3a://x", False),
])
def test_s3_roots_are_known_by_their_scheme(root: str, s3: bool) -> None:
    assert objectstore.is_s3(root) is s3


def test_s3_is_read_as_s3a_and_other_roots_stay_as_they_are() -> None:
    assert objectstore.s3a_root("s3://bucket/q/s3://x") == "s3a://bucket/q/s3://x"
    assert objectstore.s3a_root("S3://bucket/q") == "s3a://bucket/q"
    for root in ("s3a://bucket/q", "/data/s3://q", "main.queues"):
        assert objectstore.s3a_root(root) == root


def test_hadoop_aws_matches_the_hadoop_pyspark_bundles(tmp_path: Path) -> None:
    (tmp_path / "hadoop-client-api-3.5.0.jar").touch()
    (tmp_path / "hadoop-client-runtime-3.5.0.jar").touch()
    assert objectstore.hadoop_aws_package(tmp_path) == "org.apache.hadoop:hadoop-aws:3.5.0"
    installed = objectstore.hadoop_aws_package()  # the installed pyspark's own
    assert installed.startswith("org.apache.hadoop:hadoop-aws:3.")
    with pytest.raises(QueueError, match="no hadoop-client-api jar"):
        objectstore.hadoop_version(tmp_path / "none")


def test_keys_region_and_a_local_endpoint_become_s3a_settings() -> None:
    settings = objectstore.s3a_settings({**KEYS, "AWS_ENDPOINT_URL": "http://127.0.0.1:7070"})
    assert settings == {
        f"{HADOOP}access.key": "AKID",
        f"{HADOOP}secret.key": "SECRET",
        f"{HADOOP}endpoint": "http://127.0.0.1:7070",
        f"{HADOOP}path.style.access": "true",
        f"{HADOOP}connection.ssl.enabled": "false",
        f"{HADOOP}endpoint.region": "us-east-1",
    }


def test_a_session_token_selects_temporary_credentials_and_the_s3_endpoint_wins() -> None:
    settings = objectstore.s3a_settings({
        **KEYS, "AWS_SESSION_TOKEN": "TOKEN", "AWS_DEFAULT_REGION": "eu-west-1",
        "AWS_ENDPOINT_URL": "http://other:1", "AWS_ENDPOINT_URL_S3": "https://s3.example:9000",
    })
    assert settings[f"{HADOOP}session.token"] == "TOKEN"
    assert settings[f"{HADOOP}aws.credentials.provider"] == objectstore.TEMPORARY_CREDENTIALS
    assert settings[f"{HADOOP}endpoint"] == "https://s3.example:9000"
    assert settings[f"{HADOOP}connection.ssl.enabled"] == "true"
    assert settings[f"{HADOOP}endpoint.region"] == "eu-west-1"


def test_no_environment_leaves_s3a_its_own_credential_chain() -> None:
    assert objectstore.s3a_settings({}) == {}
    assert objectstore.s3a_settings({"AWS_REGION": "us-west-2"}) == {
        f"{HADOOP}endpoint.region": "us-west-2"}


@pytest.mark.parametrize("env, named", [
    ({"AWS_ACCESS_KEY_ID": "AKID"}, "AWS_SECRET_ACCESS_KEY"),
    ({"AWS_SECRET_ACCESS_KEY": "SECRET"}, "AWS_ACCESS_KEY_ID"),
    ({"AWS_ENDPOINT_URL": "127.0.0.1:7070"}, "127.0.0.1:7070"),
    ({"AWS_ENDPOINT_URL": "ftp://host"}, "ftp://host"),
])
def test_a_half_set_environment_is_a_typed_error_naming_what_is_wrong(
        env: dict[str, str], named: str) -> None:
    with pytest.raises(InvalidOption, match=named):
        objectstore.s3a_settings(env)


@pytest.mark.parametrize("java, problem", [
    ("java.lang.ClassNotFoundException: Class org.apache.hadoop.fs.s3a.S3AFileSystem not found",
     "org.apache.hadoop:hadoop-aws:"),
    ("Py4JJavaError: java.lang.ClassNotFoundException: org.apache.hadoop.fs.s3a.S3AFileSystem",
     "org.apache.hadoop:hadoop-aws:"),
    ("software.amazon.awssdk.services.s3.model.NoSuchBucketException: The specified bucket "
     "does not exist", "the bucket does not exist"),
    ("java.nio.file.AccessDeniedException: s3a://b/q/_registry: getFileStatus on ...: "
     "AccessDenied", "check AWS_ACCESS_KEY_ID"),
])
def test_a_root_s3a_cannot_reach_is_a_storage_error_naming_it(java: str, problem: str) -> None:
    failed = objectstore.unreachable("s3a://b/q", RuntimeError(java))
    assert isinstance(failed, StorageError) and failed.path == "s3a://b/q"
    assert problem in str(failed)
    assert objectstore.unreachable("/data/q", RuntimeError(java)) is None
    assert objectstore.unreachable("s3a://b/q", RuntimeError("something else")) is None


class Conf:
    """A session's settings, as ``spark.conf`` answers (no JVM needed here)."""

    def __init__(self, settings: dict[str, str]) -> None:
        self.conf = self
        self.settings = settings

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.settings.get(key, default)


def test_an_s3_root_whose_log_store_can_lose_commits_warns_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION", raising=False)
    monkeypatch.setattr(objectstore, "_warned", set())
    safe = Conf({"spark.delta.logStore.s3a.impl": objectstore.LOG_STORE})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        objectstore.warn_if_unsafe("s3a://b/safe", safe)
        objectstore.warn_if_unsafe("/data/q", Conf({}))
    with pytest.warns(RuntimeWarning, match="can lose a commit") as caught:
        objectstore.warn_if_unsafe("s3a://b/q", Conf({}))
        objectstore.warn_if_unsafe("s3a://b/q", Conf({}))  # once per root
    assert len(caught) == 1 and objectstore.LOG_STORE in str(caught[0].message)
