"""CPU-architecture names are data: as string literals in code they appear only in the route module and the
CPU table's reader (docstrings and comments excepted), so no other module keeps its own list or decides by
its own spelling whether a row is another CPU's. Read with ``ast``; the table's names and aliases are the
ones looked for."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from release.resources.cpus import cpus

ROOT = Path(__file__).resolve().parents[2]
RELEASE = ROOT / "release"
ALLOWED = {"release/route.py", "release/resources/cpus.py"}
# Files still spelling an arch, each with its reason (all other engineers' files, each an example in a
# message, no decision): a new one fails.
NOT_YET = {
    # "e.g. manylinux_2_28_x86_64" in the no-row message: f"e.g. {cpus().manylinux[0]}" would do
    "release/audit/run.py",
    # the same example in the records' message
    "release/records.py",
}
NAMES = sorted(
    {*cpus().names, *(a for c in cpus().by_name.values() for a in c.aliases)}, key=len, reverse=True
)
_ARCH = re.compile(r"(?<![A-Za-z0-9])(" + "|".join(map(re.escape, NAMES)) + r")(?![A-Za-z0-9])")


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def arch_literals(source: str) -> list[tuple[int, str]]:
    """(line, name) of each CPU arch name in a string literal of ``source`` that is not a docstring."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    return [
        (node.lineno, m[1])
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
        for m in [_ARCH.search(node.value)]
        if m is not None
    ]


def test_arch_names_are_spelled_only_by_the_route_and_the_cpu_table() -> None:
    found: dict[str, list[tuple[int, str]]] = {}
    for path in sorted(RELEASE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel not in ALLOWED and (hits := arch_literals(path.read_text(encoding="utf-8"))):
            found[rel] = hits
    new = {k: v for k, v in found.items() if k not in NOT_YET}
    assert new == {}, f"CPU arch names spelled outside release/route.py and release/resources/cpus.py: {new}"
    assert set(found) == NOT_YET, f"fixed, drop from NOT_YET: {sorted(NOT_YET - set(found))}"


def test_the_guard_fails_on_a_spelled_arch_and_passes_docstrings_and_comments() -> None:
    bad = 'def f(row):\n    """Is it an aarch64 row?"""\n    return row.platform != "x86_64"  # amd64\n'
    assert arch_literals(bad) == [(3, "x86_64")]
    assert arch_literals('TRIPLETS = {"arm64": "aarch64-linux-gnu"}\n') != []
    assert arch_literals('x = f"linux/{arch}"\nname = "ppc64lex"\n') == []  # a name inside a word is not one
    assert arch_literals('"""Module: aarch64 on x86_64."""\n# ppc64le\n') == []
