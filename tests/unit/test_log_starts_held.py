"""A leader's own commits keep the log-starts it noted: ``LogTails.log_starts_held``."""

from __future__ import annotations

from sparklog.broker.log_tail import LogTails

TOPIC = "t"


def noted_tails() -> LogTails:
    tails = LogTails()
    tails.note_log_start(TOPIC, 0, 10, version=5)  # read after the leader's run of own commits began
    tails.note_log_start(TOPIC, 1, 20, version=3)  # read before it: another writer may have moved it
    tails.note_log_start(TOPIC, 2, 30)  # read at a version not known
    tails.note_log_start(TOPIC, 3, 40, version=6)  # not in the commit
    return tails


def test_a_log_start_read_within_the_leaders_own_commits_is_noted_again_at_the_newest() -> None:
    tails = noted_tails()
    tails.log_starts_held(TOPIC, [0, 1, 2], (4, 7))
    assert tails.noted_log_start_at(TOPIC, 0) == (10, 7)
    assert tails.log_start_hint(TOPIC, 0) == (10, True)


def test_log_starts_read_before_the_run_at_an_unknown_version_or_of_other_partitions_stay() -> None:
    tails = noted_tails()
    tails.log_starts_held(TOPIC, [0, 1, 2], (4, 7))
    assert tails.noted_log_start_at(TOPIC, 1) == (20, 3), "read before the leader's own commits began"
    assert tails.noted_log_start_at(TOPIC, 2) is None, "read at no known version"
    assert tails.noted_log_start(TOPIC, 2) == 30
    assert tails.noted_log_start_at(TOPIC, 3) == (40, 6), "a partition the commit did not touch"
    assert tails.noted_log_start_at("other", 0) is None


def test_a_log_start_read_after_the_newest_commit_is_not_moved_back() -> None:
    tails = noted_tails()
    tails.log_starts_held(TOPIC, [0], (1, 4))
    assert tails.noted_log_start_at(TOPIC, 0) == (10, 5)
