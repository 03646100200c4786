"""The replay notebook runs as shipped: headless, with its kernel in the notebooks folder of a
project (as Jupyter starts it), finding the project's cluster with no settings of its own, on
a topic retention has cut (the "after an incident" case) and with no consumer group; and with a
chosen topic and group, it shows that group's lag."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

import sparklog

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "replay.ipynb"


@pytest.fixture
def project(tmp_path: Path, zk_connect: str) -> Path:
    """A checkout of the project whose ``conf/sparklog.properties`` names the test's ZooKeeper
    (the home is left to discovery: ``<project>/.sparklog``)."""
    root = tmp_path / "project"
    (root / "conf").mkdir(parents=True)
    (root / "notebooks").mkdir()
    shipped = (REPO / "conf" / "sparklog.properties").read_text()
    (root / "conf" / "sparklog.properties").write_text(
        shipped.replace("\nzookeeper.connect=\n", f"\nzookeeper.connect={zk_connect}\n")
    )
    shutil.copy(NOTEBOOK, root / "notebooks" / NOTEBOOK.name)
    return root


def produce_history(cluster: sparklog.Cluster, topic: str, partitions: int) -> None:
    cluster.create_topic(topic, partitions)
    start_ms = int(time.time() * 1000) - 30 * 60_000
    with cluster.producer(linger_ms=50) as producer:
        for i in range(2000):  # one record every 0.9 s of history: 30 minutes
            producer.send(topic, json.dumps({"n": i}).encode(), key=f"user-{i % 37}", timestamp_ms=start_ms + i * 900)


def run_notebook(path: Path, env: dict[str, str]) -> str:
    """Execute ``path`` with its kernel in the notebook's folder and ``env``; the streams' text."""
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute(env=env)
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    errors = [o for o in outputs if o.get("output_type") == "error"]
    assert not errors, "\n".join("\n".join(o.get("traceback", [])) for o in errors)
    assert any("image/png" in o.get("data", {}) for o in outputs), "the per-minute plot was not drawn"
    return "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")


def test_runs_as_shipped_from_its_folder_after_retention(project: Path, zk_connect: str, tmp_path: Path) -> None:
    with sparklog.connect({"zookeeper.connect": zk_connect, "sparklog.home": str(project / ".sparklog")}) as cluster:
        produce_history(cluster, "demo-events", 6)
        cluster.delete_records("demo-events", {0: 250})  # partition 0 lost offsets below 250
        offsets = cluster.partition_offsets("demo-events")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARKLOG_", "REPLAY_"))}
    env["HOME"] = str(tmp_path / "user")  # no user-wide cluster to fall back on
    text = run_notebook(project / "notebooks" / NOTEBOOK.name, env)
    assert "demo-events: 6 partitions" in text, text
    assert "partition 0: offsets 250.." in text and "(offsets below 250 were removed by retention)" in text, text
    assert "partition 0: offsets 100..249 were removed; replaying from 250" in text, text
    assert "30 minutes" in text or "31 minutes" in text, text
    assert f"{sum(hw - ls for ls, hw in offsets.values())} records" in text, text
    assert "no consumer group has committed offsets for demo-events" in text, text
    assert not (project / "notebooks" / ".sparklog").exists() and not (tmp_path / "user" / ".sparklog").exists()


def test_a_chosen_topic_and_group_show_the_groups_lag(
    cluster: sparklog.Cluster, cluster_options: dict[str, str], tmp_path: Path
) -> None:
    produce_history(cluster, "clicks", 4)
    half = {("clicks", p): hw // 2 for p, hw in cluster.high_watermarks("clicks").items()}
    cluster.commit_offsets("dashboards", half)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARKLOG_", "REPLAY_"))}
    env.update(
        SPARKLOG_ZOOKEEPER=cluster_options["zookeeper.connect"],
        SPARKLOG_HOME=cluster_options["sparklog.home"],
        REPLAY_TOPIC="clicks",
        REPLAY_GROUP="dashboards",
    )
    copy = tmp_path / "notebooks" / NOTEBOOK.name
    copy.parent.mkdir()
    shutil.copy(NOTEBOOK, copy)
    text = run_notebook(copy, env)
    assert "clicks: 4 partitions" in text, text
    behind = sum(hw - hw // 2 for hw in cluster.high_watermarks("clicks").values())
    assert f"group dashboards (Empty) is {behind} records behind on clicks" in text, text
