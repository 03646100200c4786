"""The rule that keeps a deleted topic's offsets out of ``__consumer_offsets`` (DESIGN §8):
a commit names the incarnation of each topic as its committer looked it up, and the offsets
log refuses it at or below the deletion marker of that topic."""

from __future__ import annotations

from sparklog.log.group_offsets import (
    GROUP_APP_ID_PREFIXES,
    OffsetCommit,
    deleted_topic_app_id,
    refused_partitions,
    unknown_topic_error,
)

OFFSETS = {
    ("orders", 0): OffsetCommit(5),
    ("orders", 1): OffsetCommit(None),  # a tombstone
    ("audit", 0): OffsetCommit(1),
    ("gone", 0): OffsetCommit(2),
}
MARKERS = {deleted_topic_app_id("orders"): 100}


def test_commits_naming_a_deleted_or_unknown_topic_are_refused_tombstones_never() -> None:
    assert refused_partitions(OFFSETS, {"orders": 100, "audit": 7}, MARKERS.get) == {("orders", 0), ("gone", 0)}
    assert refused_partitions(OFFSETS, {"orders": 99, "audit": 7, "gone": 3}, MARKERS.get) == {("orders", 0)}


def test_a_recreated_topic_and_unchecked_commits_pass() -> None:
    assert refused_partitions(OFFSETS, {"orders": 101, "audit": 7, "gone": 3}, MARKERS.get) == set()
    assert refused_partitions(OFFSETS, None, MARKERS.get) == set()


def test_the_marker_is_copied_to_followers_and_the_error_names_what_was_refused() -> None:
    assert deleted_topic_app_id("orders").startswith(GROUP_APP_ID_PREFIXES)
    error = unknown_topic_error("app", {("orders", 1), ("orders", 0)})
    assert error.partitions == {("orders", 0), ("orders", 1)}
    assert "group app refused for orders-0, orders-1" in str(error)
