"""Topic maintenance entry points: retention (delete policy) across topics.

Reads each topic's effective configs and applies its ``cleanup.policy`` through the log
layer (:mod:`sparklog.log.retention`); compaction, optimize and vacuum join here as they
land. Callers: :class:`sparklog.cluster.Cluster`, ``jobs/retention.py`` and the CLI.
Invariant: a dry run changes nothing; a topic whose policy has no ``delete`` is untouched
by delete retention.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from sparklog.log.retention import RetentionResult, apply_delete_policy

if TYPE_CHECKING:
    from sparklog.cluster import Cluster

__all__ = ["run_retention", "RetentionResult"]


def run_retention(
    cluster: "Cluster", topics: Iterable[str] | None = None, dry_run: bool = False, now_ms: int | None = None
) -> list[RetentionResult]:
    """Apply the delete policy of ``topics`` (default: every topic whose policy has ``delete``)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    selected = list(topics) if topics is not None else cluster.list_topics()
    results: list[RetentionResult] = []
    for topic in selected:
        configs = cluster.topic_config(topic)
        if "delete" not in str(configs["cleanup.policy"]).split(","):
            continue
        results += apply_delete_policy(cluster.table(topic), cluster.partitions_of(topic), configs, now, dry_run)
    return results
