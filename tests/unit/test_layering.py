"""The package cut of DESIGN §12: only log/ imports deltalake, only metadata/ imports
kazoo, and pure policies import neither Spark, ZooKeeper nor Delta."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "sparklog"
PURE_POLICIES = ["model/records.py", "model/topic.py", "model/offsets.py", "config.py", "server/controller/placement.py", "server/controller/policy.py", "log/plans.py", "errors.py"]


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def offenders(library: str, allowed_dir: str) -> list[str]:
    return [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if library in imported_roots(path) and path.relative_to(PACKAGE).parts[0] != allowed_dir
    ]


def test_only_log_imports_deltalake():
    assert offenders("deltalake", "log") == []


def test_only_coordination_imports_kazoo():
    assert offenders("kazoo", "metadata") == []


def test_pure_policies_import_no_engine():
    for name in PURE_POLICIES:
        engines = imported_roots(PACKAGE / name) & {"pyspark", "kazoo", "deltalake"}
        assert not engines, f"{name} imports {sorted(engines)}"


def test_modules_stay_small():
    sizes = {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    too_big = {name: n for name, n in sizes.items() if n > 500}
    assert not too_big, f"modules over 500 lines: {too_big}"
