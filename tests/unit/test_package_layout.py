"""The house's shape, from the code (docs/architecture.md): no folder of release/ holds more than 15
modules flat; no import cycle inside release/ (every import statement, function-level ones too, read
with ``ast``; ``if TYPE_CHECKING:`` blocks are types, not imports); and the floor (release/core/,
release/binary/, release/runpath.py) imports no stage. Each rule has a must-fail case."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RELEASE = ROOT / "release"
MOST_FLAT = 15
MOST_LINES = 500
# Modules over MOST_LINES, each with its length when listed: the list may only shrink (a listed module
# that grows, or a new one over the limit, fails). None is left: upload.py, smoke/run.py and the index
# client are split.
OVER_LINES: dict[str, int] = {}
# Folders over the limit, each listed with its reason (none left: audit/, publish/ and wheelbuild/ are in
# wings); never silently skipped, a new folder over the limit fails.
NOT_YET_IN_WINGS: set[str] = set()
# Known import cycles, each listed with its reason (none left: the command line's shared options are in
# release/commands/options.py and verify has one entry).
KNOWN_CYCLES: set[frozenset[str]] = set()
# The floor: what it may import of release (nothing above it).
FLOOR = {
    "release.core": ("release.core",),
    "release.binary": ("release.binary", "release.core", "release.resources.cpus"),
    "release.resources.cpus": ("release.core",),  # the CPU table's reader: the ELF readers name arches by it
    "release.runpath": (),
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(
    source: str, name: str, is_package: bool, known: Iterable[str], *, types: bool = False
) -> set[str]:
    """The release modules a module imports (``from pkg import mod`` names ``pkg.mod`` when it is one);
    ``types``: the imports under ``if TYPE_CHECKING:`` count too."""
    known = set(known)
    package = name if is_package else name.rpartition(".")[0]
    out: set[str] = set()

    def walk(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and _type_checking(node):
                walk([*node.body, *node.orelse] if types else node.orelse)
                continue
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    module = ".".join([*base, module] if module else base)
                for alias in node.names:
                    full = f"{module}.{alias.name}"
                    out.add(full if full in known else module)
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(node, field, None)
                if isinstance(inner, list):
                    walk(inner)

    walk(ast.parse(source).body)
    return {m for m in out if m in known and m != name}


def import_graph(*, types: bool = False) -> dict[str, set[str]]:
    paths = {module_name(p): p for p in RELEASE.rglob("*.py")}
    return {
        name: imports(path.read_text(encoding="utf-8"), name, path.name == "__init__.py", paths, types=types)
        for name, path in paths.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[frozenset[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def test_no_folder_holds_more_than_15_modules_flat() -> None:
    crowded = {}
    for folder in sorted({p.parent for p in RELEASE.rglob("*.py")}):
        rel = folder.relative_to(ROOT).as_posix()
        count = len(list(folder.glob("*.py")))
        if count > MOST_FLAT and rel not in NOT_YET_IN_WINGS:
            crowded[rel] = count
    assert crowded == {}, (
        f"put these folders' modules in wings (sub-packages) of at most {MOST_FLAT}: {crowded}"
    )
    assert len(list((RELEASE / "audit").glob("*.py"))) <= MOST_FLAT


def too_long(lengths: dict[str, int], listed: dict[str, int]) -> dict[str, int]:
    """Modules over MOST_LINES that are not listed, or longer than listed; and listed ones now split (pure)."""
    over = {name: n for name, n in lengths.items() if n > MOST_LINES and n > listed.get(name, MOST_LINES)}
    split = {name: lengths[name] for name in listed if lengths.get(name, 0) <= MOST_LINES and name in lengths}
    return over | split


def test_no_module_grows_over_500_lines() -> None:
    lengths = {
        str(path.relative_to(ROOT)): len(path.read_text(encoding="utf-8").splitlines())
        for path in RELEASE.rglob("*.py")
    }
    assert too_long(lengths, OVER_LINES) == {}, (
        f"over {MOST_LINES} lines (split them), or split (unlist them)"
    )


def test_the_size_guard_fails_on_what_it_guards() -> None:
    listed = {"release/a.py": 520}
    assert too_long({"release/a.py": 520, "release/b.py": 500}, listed) == {}  # must pass
    assert too_long({"release/a.py": 521}, listed) == {"release/a.py": 521}  # a listed one grew
    assert too_long({"release/a.py": 520, "release/c.py": 501}, listed) == {"release/c.py": 501}  # a new one
    assert too_long({"release/a.py": 480}, listed) == {"release/a.py": 480}  # split: unlist it


def test_no_import_cycle_inside_release() -> None:
    found = [sorted(c) for c in cycles(import_graph()) if c not in KNOWN_CYCLES]
    assert found == [], f"import cycles inside release/: {found}"


def test_no_import_cycle_inside_release_counting_type_only_imports() -> None:
    found = [sorted(c) for c in cycles(import_graph(types=True))]
    assert found == [], f"import cycles inside release/, ``if TYPE_CHECKING:`` imports counted: {found}"


def test_the_floor_imports_no_stage() -> None:
    graph = import_graph()
    wrong = {}
    for name, imported in sorted(graph.items()):
        for floor, allowed in FLOOR.items():
            if name == floor or name.startswith(floor + "."):
                above = sorted(m for m in imported if not m.startswith(allowed) or not allowed)
                if above:
                    wrong[name] = above
    assert wrong == {}, f"release/core, release/binary and release/runpath.py import no stage: {wrong}"


def test_the_guards_fail_on_what_they_guard() -> None:
    known = {"release.a", "release.b", "release.c", "release.core.x"}
    a = imports("from release import b\n", "release.a", False, known)
    b = imports("def f():\n    from release.a import thing\n", "release.b", False, known)
    c = imports(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from release import a\n",
        "release.c",
        False,
        known,
    )
    assert cycles({"release.a": a, "release.b": b, "release.c": c}) == [frozenset({"release.a", "release.b"})]
    typed = imports(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from release import a\n",
        "release.c",
        False,
        known,
        types=True,
    )
    assert typed == {"release.a"}  # a type-only import, counted when asked
    assert cycles({"release.a": {"release.c"}, "release.c": typed}) == [frozenset({"release.a", "release.c"})]
    floor = imports(
        "from release.audit.model import Finding\n", "release.core.x", False, {"release.audit.model"}
    )
    assert floor == {"release.audit.model"} and not floor <= {
        m for m in floor if m.startswith("release.core")
    }
