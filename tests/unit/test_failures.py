"""Which errors are the storage's (sparkqueue.store.failures.storage_failure), and the
typed error they become (storage_error): pure logic."""

from __future__ import annotations

from sparkqueue.errors import StorageError, TaskNotFound
from sparkqueue.store.failures import is_conflict, storage_error, storage_failure

#: what py4j shows of an S3A failure: the call, the Java exception and its causes
S3A_FAILURE = """An error occurred while calling o79.sql.
: org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 failed
\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:2)
Caused by: java.io.UncheckedIOException: listing s3a://queues/q/_delta_log
\tat org.apache.hadoop.fs.s3a.Listing.next(Listing.java:655)
Caused by: org.apache.hadoop.fs.s3a.AWSClientIOException: getFileStatus on s3a://queues/q: \
software.amazon.awssdk.core.exception.SdkClientException: Unable to execute HTTP request: \
Connection reset (SDK Attempt Count: 3)
\tat org.apache.hadoop.fs.s3a.S3AUtils.translateException(S3AUtils.java:215)
"""


def test_a_storage_failure_is_named_by_its_deepest_cause() -> None:
    found = storage_failure(RuntimeError(S3A_FAILURE))
    assert found is not None
    assert found.startswith("org.apache.hadoop.fs.s3a.AWSClientIOException: getFileStatus")
    assert "Connection reset" in found and "\n" not in found


def test_a_throttled_or_unreachable_store_is_a_storage_failure() -> None:
    for text in ("org.apache.hadoop.fs.s3a.AWSServiceThrottledException: SlowDown",
                 "java.net.ConnectException: Connection refused",
                 "java.net.SocketTimeoutException: Read timed out"):
        assert storage_failure(RuntimeError(f"An error occurred:\n: {text}")) == text


def test_other_errors_are_not_the_storages() -> None:
    assert storage_failure(ValueError("bad literal")) is None
    assert storage_failure(RuntimeError("[DELTA_CONCURRENT_APPEND] files were added")) is None
    assert storage_failure(TaskNotFound("t", [1])) is None  # typed already
    assert storage_failure(StorageError("s3a://b/q", "java.io.IOException: x")) is None


def test_a_storage_failure_becomes_one_storage_error_naming_where() -> None:
    error = storage_error("s3a://queues/q/_registry", RuntimeError(S3A_FAILURE), "jobs")
    assert isinstance(error, StorageError)
    assert (error.path, error.tube) == ("s3a://queues/q/_registry", "jobs")
    assert error.problem.startswith("the storage failed: org.apache.hadoop.fs.s3a.")
    assert error.transient  # the storage failing, which may pass; a missing table is not
    refused = storage_error("s3a://queues/q", RuntimeError(
        "java.nio.file.AccessDeniedException: s3a://queues/q: "
        "software.amazon.awssdk.services.s3.model.S3Exception: Access Denied "
        "(Service: S3, Status Code: 403)"))
    assert refused is not None and not refused.transient  # waiting will not help
    assert not StorageError("s3a://queues/q/t/tasks", "the Delta table is missing").transient
    already = StorageError("s3a://queues/q", error.problem)
    assert storage_error("s3a://queues/q", already) is None  # typed once, never wrapped again
    assert storage_error("s3a://queues/q", ValueError("bad literal")) is None


def test_a_conflict_is_retried_not_a_storage_failure() -> None:
    """A commit that lost to another writer's (the log store's 412) is a conflict."""
    lost = RuntimeError("java.nio.file.FileAlreadyExistsException: s3a://b/q/_delta_log/7.json")
    assert is_conflict(lost)
