"""The replay notebook runs clean, headless, against a real topic and consumer group."""

from __future__ import annotations

import json
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

import sparklog

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "replay.ipynb"


def test_replay_notebook_runs_clean(
    cluster: sparklog.Cluster, cluster_options: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cluster.create_topic("clicks", 4)
    start_ms = int(time.time() * 1000) - 30 * 60_000
    with cluster.producer(linger_ms=50) as producer:
        for i in range(2000):  # one record every 0.9 s of history: 30 minutes
            producer.send(
                "clicks",
                value=json.dumps({"n": i}).encode(),
                key=f"user-{i % 37}".encode(),
                timestamp_ms=start_ms + i * 900,
            )
    cluster.commit_offsets(
        "dashboards", {("clicks", p): hw // 2 for p, hw in cluster.high_watermarks("clicks").items()}
    )
    monkeypatch.setenv("SPARKLOG_ZOOKEEPER", cluster_options["zookeeper.connect"])
    monkeypatch.setenv("SPARKLOG_HOME", cluster_options["sparklog.home"])
    monkeypatch.setenv("REPLAY_TOPIC", "clicks")
    monkeypatch.setenv("REPLAY_GROUP", "dashboards")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "clicks: 4 partitions" in text
    assert "31 minutes" in text or "30 minutes" in text, text
    behind = sum(hw - hw // 2 for hw in cluster.high_watermarks("clicks").values())
    assert f"group dashboards is {behind} records behind" in text
    assert any("image/png" in o.get("data", {}) for o in outputs), "the per-minute plot was not drawn"
