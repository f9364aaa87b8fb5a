"""The portable engine's file statistics (the Delta log's checkpoint and the commits
after it, read without Delta's state) are the accelerator's (a snapshot's state)."""

from __future__ import annotations

from sparkqueue import Queue


def test_the_log_checkpoint_gives_the_statistics_a_snapshot_gives(sq: Queue) -> None:
    t = sq.create_tube("s", "fifottl")
    layout = t.context.layout
    path = layout.tasks("s")
    interval = layout.spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").where(
        "key = 'delta.checkpointInterval'").collect()
    assert [r[1] for r in interval] == ["100"], "a tube's tables: a checkpoint in 100 commits"
    layout.spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES "
                     "('delta.checkpointInterval' = '10')")
    t.put([{"n": i} for i in range(3)])
    for _ in range(6):  # a dozen commits: Delta writes a checkpoint at version 10
        t.take(2)
        t.release_all()
    assert layout.read_text(layout.log_file(path, "_last_checkpoint")) is not None
    portable = layout.checkpoint_stats(path)
    assert layout.engine == "accelerated"
    accelerated = layout.store.load_file_stats(path, layout.latest_version(path))
    assert portable is not None and accelerated is not None
    assert portable[0] == accelerated[0] == layout.latest_version(path)
    assert portable[1] == accelerated[1] and len(portable[1]) >= 2
