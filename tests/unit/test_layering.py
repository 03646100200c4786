"""The package cut of DESIGN §12, computed from the code's own imports (function-level ones
included): no import cycle, the library walls (only log/ imports deltalake, only metadata/
imports kazoo), pure policies free of every engine, the CLI on the public API only."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "sparklog"
PACKAGES = {"model", "log", "metadata", "server", "clients", "group", "admin", "maintenance", "spark", "cli", "testing"}
ROOT_MODULES = {"__init__.py", "clock.py", "cluster.py", "config.py", "discovery.py", "errors.py", "retries.py"}
ENGINES = {"pyspark", "kazoo", "deltalake"}
PURE_POLICIES = [
    "sparklog.model.records",
    "sparklog.model.topic",
    "sparklog.model.offsets",
    "sparklog.model.batches",
    "sparklog.model.kafka_batches",
    "sparklog.model.kafka_compression",
    "sparklog.clock",
    "sparklog.config",
    "sparklog.discovery",
    "sparklog.errors",
    "sparklog.retries",
    "sparklog.server.controller.placement",
    "sparklog.server.controller.policy",
    "sparklog.log.plans",
    "sparklog.group.assignors",
    "sparklog.group.reset",
    "sparklog.group.ids",
]
# What the CLI may use: the public API. The embedded ZooKeeper's start/stop/status are
# commands of their own (``sparklog zookeeper``), so that one metadata module is public too,
# and so is the embedded broker (``sparklog broker start --embedded|stop|status``).
CLI_ALLOWED = (
    "sparklog.cli",
    "sparklog.cluster",
    "sparklog.clock",
    "sparklog.config",
    "sparklog.discovery",
    "sparklog.errors",
    "sparklog.model",
    "sparklog.admin",
    "sparklog.clients",
    "sparklog.maintenance",
    "sparklog.spark",
    "sparklog.server.broker",
    "sparklog.server.embedded_broker",
    "sparklog.metadata.embedded",
)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def resolve(name: str) -> str | None:
    """The sparklog module an import of ``name`` loads (a package's ``__init__`` for a package)."""
    while name and name not in modules():
        name = name.rpartition(".")[0]
    return name or None


def imports(path: Path) -> Iterator[str]:
    """Every absolute name imported anywhere in ``path``: ``from a import b`` gives ``a.b``
    where that is a module, else ``a`` (``b`` is then a name defined in ``a``)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                yield full if full in modules() else node.module


@cache
def graph() -> dict[str, frozenset[str]]:
    edges: dict[str, frozenset[str]] = {}
    for name, path in modules().items():
        targets = {resolve(i) for i in imports(path) if i.split(".")[0] == "sparklog"}
        edges[name] = frozenset(t for t in targets if t is not None and t != name)
    return edges


def cycles(edges: dict[str, frozenset[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def roots(path: Path) -> set[str]:
    return {name.split(".")[0] for name in imports(path)}


def offenders(library: str, allowed_package: str) -> list[str]:
    return sorted(
        name
        for name, path in modules().items()
        if library in roots(path) and not name.startswith(f"sparklog.{allowed_package}")
    )


def test_cycle_finder_finds_a_cycle():
    edges = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"}), "d": frozenset({"a"})}
    assert cycles(edges) == [["a", "b", "c"]]


def test_no_import_cycles():
    found = cycles(graph())
    assert not found, "import cycles (each list imports itself around):\n" + "\n".join(map(str, found))


def test_every_module_lives_in_a_package_of_the_cut():
    stray = sorted(
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if (p.parent == PACKAGE and p.name not in ROOT_MODULES)
        or (p.parent != PACKAGE and p.relative_to(PACKAGE).parts[0] not in PACKAGES)
    )
    assert not stray, f"modules outside the package cut of DESIGN §12: {stray}"


def test_only_log_imports_deltalake():
    assert offenders("deltalake", "log") == []


def test_only_metadata_imports_kazoo():
    assert offenders("kazoo", "metadata") == []


def test_pure_policies_import_no_engine_even_indirectly():
    for name in PURE_POLICIES:
        seen, todo = set(), [name]
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            engines = roots(modules()[current]) & ENGINES
            assert not engines, f"{name} reaches {sorted(engines)} through {current}"
            todo.extend(graph()[current])


def test_cli_uses_the_public_api_only():
    internal = {
        f"{name} -> {target}"
        for name, targets in graph().items()
        if name == "sparklog.cli" or name.startswith("sparklog.cli.")
        for target in targets
        if target != "sparklog" and not target.startswith(CLI_ALLOWED)
    }
    assert not internal, f"the CLI reaches into internals: {sorted(internal)}"


def test_modules_stay_small():
    sizes = {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    too_big = {name: n for name, n in sizes.items() if n > 500}
    assert not too_big, f"modules over 500 lines: {too_big}"


def test_wall_clock_is_read_in_one_place():
    readers = sorted(
        name
        for name, path in modules().items()
        if name != "sparklog.clock" and ("time.time()" in path.read_text() or "time.time_ns()" in path.read_text())
    )
    assert not readers, f"read the wall clock through sparklog.clock, not time.time(): {readers}"
