"""The package cut of DESIGN §12, computed from the code's own imports (function-level ones
included): no import cycle between modules nor between packages, every package importing
only what its row of DESIGN §12's direction table names, the broker imported only through
its entry points, the library walls (only log/ imports deltalake, only metadata/ imports
kazoo), pure policies free of every engine, the CLI on the public API only."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "sparklog"
DESIGN = PACKAGE.parent / "docs" / "DESIGN.md"
PACKAGES = {
    "model",
    "log",
    "metadata",
    "runtime",
    "broker",
    "clients",
    "group",
    "admin",
    "maintenance",
    "spark",
    "cli",
    "testing",
}
ROOT_MODULES = {"__init__.py", "clock.py", "cluster.py", "config.py", "discovery.py", "errors.py", "retries.py"}
ENGINES = {"pyspark", "kazoo", "deltalake"}
# Pure policies besides every module of model/ (which is pure as a whole).
PURE_POLICIES = [
    "sparklog.clock",
    "sparklog.config",
    "sparklog.discovery",
    "sparklog.errors",
    "sparklog.retries",
    "sparklog.runtime.placement",
    "sparklog.runtime.policy",
    "sparklog.log.plans",
    "sparklog.group.assignors",
    "sparklog.group.reset",
]
# The broker's entry points: what the CLI starts (``sparklog broker start [--embedded]``,
# ``broker stop|status``). Nothing else outside broker/ may import broker/.
BROKER_ENTRY_POINTS = frozenset({"sparklog.broker.agent", "sparklog.broker.embedded_broker"})
# What the CLI may use: the public API. The embedded ZooKeeper's start/stop/status are
# commands of their own (``sparklog zookeeper``), so that one metadata module is public too,
# and so are the broker's entry points.
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
    *sorted(BROKER_ENTRY_POINTS),
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


def package_of(module: str) -> str:
    """The node of the package graph ``module`` belongs to: its package under ``sparklog``
    (``sparklog.group.coordinator`` -> ``group``), a root module itself (``sparklog.errors`` ->
    ``errors``), ``sparklog`` for the package's own ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def package_graph(edges: Mapping[str, frozenset[str]]) -> dict[str, frozenset[str]]:
    """The module graph folded onto packages (imports within one package dropped)."""
    folded: dict[str, set[str]] = {}
    for module, targets in edges.items():
        source = package_of(module)
        folded.setdefault(source, set()).update(package_of(t) for t in targets if package_of(t) != source)
    return {package: frozenset(targets) for package, targets in folded.items()}


def direction_table(design: str) -> dict[str, frozenset[str]]:
    """DESIGN §12's package direction table: ``| `a`, `b` | base, `c` |`` rows under the
    ``| package | may import |`` header; ``base`` stands for the row that defines it, a root
    module is named with ``.py`` and ``__init__.py`` is the ``sparklog`` package itself."""

    def names(cell: str) -> list[str]:
        found = [n.removesuffix(".py") for n in re.findall(r"`([^`]+)`", cell)]
        return ["sparklog" if n == "__init__" else n for n in found]

    rows = design.split("| package | may import |", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    table: dict[str, frozenset[str]] = {}
    base: frozenset[str] = frozenset()
    for row in rows:
        packages, allowed = row.strip().strip("|").split("|")
        targets = frozenset(names(allowed)) | (base if re.search(r"\bbase\b", allowed) else frozenset())
        if packages.strip() == "base":
            base = targets
            continue
        table.update(dict.fromkeys(names(packages), targets))
    return table


def violations(packages: Mapping[str, frozenset[str]], allowed: Mapping[str, frozenset[str]]) -> list[str]:
    """Package imports the direction table does not allow, as ``a -> b``."""
    return sorted(
        f"{source} -> {target}"
        for source, targets in packages.items()
        for target in targets
        if target not in allowed.get(source, frozenset())
    )


def roots(path: Path) -> set[str]:
    return {name.split(".")[0] for name in imports(path)}


def offenders(library: str, allowed_package: str) -> list[str]:
    return sorted(
        name
        for name, path in modules().items()
        if library in roots(path) and not name.startswith(f"sparklog.{allowed_package}")
    )


def test_cycle_finder_finds_a_cycle() -> None:
    edges = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"}), "d": frozenset({"a"})}
    assert cycles(edges) == [["a", "b", "c"]]


def test_no_import_cycles() -> None:
    found = cycles(graph())
    assert not found, "import cycles (each list imports itself around):\n" + "\n".join(map(str, found))


def test_package_cycle_finder_finds_a_planted_cycle() -> None:
    # No module imports itself around, but runtime and group import each other.
    edges = {
        "sparklog.group.coordinator": frozenset({"sparklog.runtime.topics"}),
        "sparklog.runtime.topics": frozenset({"sparklog.errors"}),
        "sparklog.runtime.deleted_topics": frozenset({"sparklog.group.ids"}),
        "sparklog.group.ids": frozenset(),
        "sparklog.errors": frozenset(),
    }
    assert cycles(edges) == []
    assert cycles(package_graph(edges)) == [["group", "runtime"]]


def test_direction_checker_flags_an_import_against_the_table() -> None:
    allowed = {"runtime": frozenset({"errors"}), "group": frozenset({"runtime", "errors"})}
    packages = {"runtime": frozenset({"errors", "group"}), "group": frozenset({"runtime"})}
    assert violations(packages, allowed) == ["runtime -> group"]


def test_no_package_cycles() -> None:
    found = cycles(package_graph(graph()))
    assert not found, "package cycles (each list imports itself around):\n" + "\n".join(map(str, found))


def test_direction_table_is_a_direction_and_covers_every_package() -> None:
    table = direction_table(DESIGN.read_text(encoding="utf-8"))
    assert not cycles(table), f"DESIGN §12's direction table has a cycle: {cycles(table)}"
    nodes = set(package_graph(graph())) | {t for ts in package_graph(graph()).values() for t in ts}
    assert nodes <= set(table), f"packages without a row in DESIGN §12's direction table: {sorted(nodes - set(table))}"
    assert set(table) <= PACKAGES | {m.removesuffix(".py") for m in ROOT_MODULES} | {"sparklog"}


def test_packages_import_only_what_the_direction_table_allows() -> None:
    found = violations(package_graph(graph()), direction_table(DESIGN.read_text(encoding="utf-8")))
    assert not found, f"imports against DESIGN §12's direction table: {found}"


def test_only_the_cli_imports_the_broker_and_only_its_entry_points() -> None:
    reached = sorted(
        f"{name} -> {target}"
        for name, targets in graph().items()
        if package_of(name) != "broker"
        for target in targets
        if package_of(target) == "broker" and not (package_of(name) == "cli" and target in BROKER_ENTRY_POINTS)
    )
    assert not reached, f"the broker is imported from outside, not through its entry points: {reached}"


def test_every_module_lives_in_a_package_of_the_cut() -> None:
    stray = sorted(
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if (p.parent == PACKAGE and p.name not in ROOT_MODULES)
        or (p.parent != PACKAGE and p.relative_to(PACKAGE).parts[0] not in PACKAGES)
    )
    assert not stray, f"modules outside the package cut of DESIGN §12: {stray}"


def test_only_log_imports_deltalake() -> None:
    assert offenders("deltalake", "log") == []


def test_only_metadata_imports_kazoo() -> None:
    assert offenders("kazoo", "metadata") == []


def test_only_the_object_store_module_reaches_object_stores() -> None:
    # Every byte of a table goes through log/storage.py (TableStorage); the store kind of it,
    # and the probe of a store, through log/object_store.py.
    assert offenders("obstore", "log.object_store") == []


def test_pure_policies_import_no_engine_even_indirectly() -> None:
    for name in sorted(m for m in modules() if m in PURE_POLICIES or package_of(m) == "model"):
        seen, todo = set(), [name]
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            engines = roots(modules()[current]) & ENGINES
            assert not engines, f"{name} reaches {sorted(engines)} through {current}"
            todo.extend(graph()[current])


def test_cli_uses_the_public_api_only() -> None:
    internal = {
        f"{name} -> {target}"
        for name, targets in graph().items()
        if name == "sparklog.cli" or name.startswith("sparklog.cli.")
        for target in targets
        if target != "sparklog" and not target.startswith(CLI_ALLOWED)
    }
    assert not internal, f"the CLI reaches into internals: {sorted(internal)}"


def test_modules_stay_small() -> None:
    sizes = {str(p.relative_to(PACKAGE)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    too_big = {name: n for name, n in sizes.items() if n > 500}
    assert not too_big, f"modules over 500 lines: {too_big}"


def test_wall_clock_is_read_in_one_place() -> None:
    readers = sorted(
        name
        for name, path in modules().items()
        if name != "sparklog.clock" and ("time.time()" in path.read_text() or "time.time_ns()" in path.read_text())
    )
    assert not readers, f"read the wall clock through sparklog.clock, not time.time(): {readers}"
