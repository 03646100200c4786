"""Citations of docs/DESIGN.md resolve, and what it names exists.

Code, tests and docs cite the design as "DESIGN" followed by a section sign and a number
(also "DESIGN.md", a doubled sign, lists, ranges, "5.<n>" for an invariant) and as
"invariant <n>". Each must point at a numbered section heading (``## <n>. Title``) or a
numbered invariant of section 5 (``<n>. **Name.**``); the design document's own references
to tests, modules and topic notes must exist. Failures list every offender as file:line.

Every section sign followed by a number counts as a design citation (the repository has one
numbered design document). This file is not scanned: its examples cite on purpose.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "DESIGN.md"
SCANNED = [
    "sparklog",
    "jobs",
    "tests",
    "docs",
    "benchmarks",
    "notebooks",
    "conf",
    "scripts",
    "pyspark_sparklog",
    "README.md",
]
TEXT_SUFFIXES = {".py", ".md", ".json", ".ipynb", ".txt", ".toml", ".cfg", ".conf", ".properties", ".sh"}
INVARIANTS_SECTION = 5

SIGN = "\u00a7"
_NUMBER = r"\d+(?:\.\d+)?"
_RANGE = r"\s*(?:-|\u2013|\u2014|\bto\b)\s*"
_LIST = r"\s*(?:,|\band\b|\bor\b|&)\s*"
# A citation chain: a sign, a number, then more numbers after a range separator ("9-10") or
# after a list separator that a sign follows ("2, <sign>4 and <sign>10"); after a doubled
# sign, list items need no sign of their own. So "<sign>5, 6 partitions" cites only 5.
_SINGLE = re.compile(
    rf"(?<!{SIGN}){SIGN}(?!{SIGN})\s*(?P<chain>{_NUMBER}(?:(?:{_RANGE}{SIGN}?|{_LIST}{SIGN})\s*{_NUMBER})*)"
)
_DOUBLE = re.compile(rf"{SIGN}{SIGN}\s*(?P<chain>{_NUMBER}(?:(?:{_RANGE}|{_LIST}){SIGN}{{0,2}}\s*{_NUMBER})*)")
_INVARIANTS = re.compile(rf"\binvariants?[\s#*>]+(?P<chain>\d+(?:(?:{_RANGE}|{_LIST})\d+)*)(?!\.\d)", re.IGNORECASE)
_SEPARATOR = re.compile(rf"({_RANGE}|{_LIST})")
_RANGE_WORDS = {"-", "\u2013", "\u2014", "to"}


@dataclass(frozen=True)
class Citation:
    kind: str  # "section" or "invariant"
    key: str  # "9", "5.1" (section 5, item 1) or "4" (invariant)
    offset: int  # where the citation starts in the text


def _expand(chain: str) -> list[str]:
    """The numbers of a chain; a range of whole numbers ("1-4") is expanded."""
    keys: list[str] = []
    in_range = False
    for part in _SEPARATOR.split(chain.replace(SIGN, "")):
        token = part.strip()
        if _SEPARATOR.fullmatch(part):
            in_range = token in _RANGE_WORDS
            continue
        if in_range and keys and keys[-1].isdigit() and token.isdigit():
            keys.extend(str(n) for n in range(int(keys[-1]) + 1, int(token) + 1))
        elif token:
            keys.append(token)
        in_range = False
    return keys


def citations(text: str) -> list[Citation]:
    """Every design citation in ``text``, in order of appearance."""
    found = [
        Citation("section", key, match.start())
        for pattern in (_SINGLE, _DOUBLE)
        for match in pattern.finditer(text)
        for key in _expand(match.group("chain"))
    ]
    found += [
        Citation("invariant", key, match.start())
        for match in _INVARIANTS.finditer(text)
        for key in _expand(match.group("chain"))
    ]
    return sorted(found, key=lambda c: c.offset)


@dataclass(frozen=True)
class Design:
    sections: list[int]
    subsections: set[str]
    invariants: list[int]
    invariant_text: dict[int, str]

    def resolves(self, citation: Citation) -> bool:
        if citation.kind == "invariant":
            return int(citation.key) in self.invariants
        if "." not in citation.key:
            return int(citation.key) in self.sections
        section, item = citation.key.split(".")
        if int(section) == INVARIANTS_SECTION:
            return int(item) in self.invariants
        return citation.key in self.subsections


def parse_design(text: str) -> Design:
    sections = [int(n) for n in re.findall(r"^## (\d+)\. \S", text, re.MULTILINE)]
    subsections = set(re.findall(r"^### (\d+\.\d+)\.? \S", text, re.MULTILINE))
    body = re.search(rf"^## {INVARIANTS_SECTION}\. .*?(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    items: dict[int, str] = {}
    if body:
        starts = list(re.finditer(r"^(\d+)\.\s+\*\*", body.group(0), re.MULTILINE))
        for i, start in enumerate(starts):
            end = starts[i + 1].start() if i + 1 < len(starts) else len(body.group(0))
            items[int(start.group(1))] = body.group(0)[start.start() : end]
    return Design(sections, subsections, list(items), items)


def scanned_files() -> list[Path]:
    files: list[Path] = []
    for name in SCANNED:
        path = ROOT / name
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files.extend(
                p
                for p in sorted(path.rglob("*"))
                if p.is_file() and p.suffix in TEXT_SUFFIXES and "__pycache__" not in p.parts
            )
    return [f for f in files if f.resolve() != Path(__file__).resolve()]


def read_text(path: Path) -> str:
    text = path.read_text(encoding="utf-8", errors="replace")
    # JSON (benchmark results, notebooks) may carry the sign as an escape.
    return text.replace("\\u00a7", SIGN) if path.suffix in {".json", ".ipynb"} else text


def unresolved(files: list[Path], design: Design) -> list[str]:
    problems = []
    for path in files:
        text = read_text(path)
        for citation in citations(text):
            if not design.resolves(citation):
                line = text.count("\n", 0, citation.offset) + 1
                name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                what = f"{SIGN}{citation.key}" if citation.kind == "section" else f"invariant {citation.key}"
                problems.append(f"{name}:{line}: {what}")
    return problems


# -- the repository ------------------------------------------------------------------------------
def design_text() -> str:
    assert DESIGN.is_file(), f"{DESIGN} is missing: the code cites its sections and invariants"
    return DESIGN.read_text(encoding="utf-8")


def test_every_design_citation_resolves() -> None:
    design = parse_design(design_text())
    problems = unresolved(scanned_files(), design)
    assert not problems, "citations with no section or invariant in docs/DESIGN.md:\n" + "\n".join(problems)


def test_design_numbering_is_consecutive_and_invariants_name_their_tests() -> None:
    design = parse_design(design_text())
    assert design.sections == list(range(1, len(design.sections) + 1)), f"sections out of order: {design.sections}"
    assert INVARIANTS_SECTION in design.sections
    assert design.invariants == list(range(1, len(design.invariants) + 1)), f"invariants: {design.invariants}"
    test_name = re.compile(r"`tests/\S+\.py::test_\w+`")
    untested = [n for n, text in design.invariant_text.items() if not test_name.search(text)]
    assert not untested, f"invariants naming no test: {untested}"


_REPO_PREFIXES = ("sparklog/", "jobs/", "tests/", "docs/", "benchmarks/", "conf/", "notebooks/", "pyspark_sparklog/")


def test_names_in_the_design_document_exist() -> None:
    text = design_text()
    missing = []
    for match in re.finditer(r"`([^`\n]+)`", text):
        ref = match.group(1)
        if not ref.startswith(_REPO_PREFIXES) or " " in ref:
            continue
        path, _, name = ref.partition("::")
        line = text.count("\n", 0, match.start()) + 1
        defined = re.compile(rf"^\s*(?:def|class)\s+{re.escape(name)}\b", re.MULTILINE)
        if not (ROOT / path).exists():
            missing.append(f"docs/DESIGN.md:{line}: {path} does not exist")
        elif name and not defined.search((ROOT / path).read_text(encoding="utf-8")):
            missing.append(f"docs/DESIGN.md:{line}: {path} has no {name}")
    for match in re.finditer(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)", text):
        if not (DESIGN.parent / match.group(1)).exists():
            line = text.count("\n", 0, match.start()) + 1
            missing.append(f"docs/DESIGN.md:{line}: link {match.group(1)} is broken")
    assert not missing, "\n".join(missing)


# -- the scanner itself --------------------------------------------------------------------------
def test_scanner_reads_every_citation_form() -> None:
    s = SIGN
    text = (
        f"DESIGN {s}6's facts; DESIGN.md {s}9. See DESIGN {s}2, {s}4 and {s}10; DESIGN {s}{s}9-10 and 12;\n"
        f"(DESIGN {s}5.6, {s}5.7) and {s}5.1): Invariants 1, 2 and 4; invariant 1 and 4 of DESIGN {s}5;\n"
        "Invariants 1-4 across crashes; (DESIGN invariant 10); gaps (invariant\n"
        "    # 7). Invariants (tested elsewhere) and 3 partitions.\n"
    )
    keys = [(c.kind, c.key) for c in citations(text)]
    sections = ["6", "9", "2", "4", "10", "9", "10", "12", "5.6", "5.7", "5.1", "5"]
    assert [k for kind, k in keys if kind == "section"] == sections
    assert [k for kind, k in keys if kind == "invariant"] == ["1", "2", "4", "1", "4", "1", "2", "3", "4", "10", "7"]


def test_unresolved_citations_are_listed_with_file_and_line(tmp_path: Path) -> None:
    design = parse_design(
        "# d\n## 1. One\n## 5. Invariants\n1. **A.** x `tests/t.py::test_a`\n2. **B.** y\n## 6. Six\n### 6.1 Sub\n"
    )
    good = tmp_path / "good.py"
    good.write_text(f'"""DESIGN {SIGN}1, {SIGN}6.1 and {SIGN}5.2; invariant 1."""\n', encoding="utf-8")
    bad = tmp_path / "bad.md"
    bad.write_text(f"fine {SIGN}6\n\nDESIGN {SIGN}7 and invariants 2-3; {SIGN}5.9\n", encoding="utf-8")
    assert unresolved([good], design) == []
    problems = unresolved([good, bad], design)
    assert problems == [f"{bad}:3: {SIGN}7", f"{bad}:3: invariant 3", f"{bad}:3: {SIGN}5.9"]
