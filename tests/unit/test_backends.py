"""The backends registry (release/wheelbuild/backends/): the names are spelled once, each backend module
has the protocol's plan and build, --backend's choices and docs/building.md's table come from it."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import get_args

from release.cli import build_parser
from release.wheelbuild.backends import AUTO, BACKENDS, CHOICES, NAMES, Backend, BackendChoice
from release.wheelbuild.backends.protocol import BuildBackend, load

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = "release/wheelbuild/backends/__init__.py"
_ROW = re.compile(r"^\| `(?P<name>[a-z]+)` \| (?P<module>[^|]+) \| (?P<builds>[^|]+) \|$", re.M)


def test_the_registry_and_the_types_name_the_same_backends() -> None:
    assert NAMES == get_args(Backend) == ("host", "container")
    assert (AUTO, *NAMES) == CHOICES and set(get_args(BackendChoice)) >= {AUTO}


def test_each_backend_module_has_the_protocols_plan_and_build() -> None:
    for backend in BACKENDS:
        module = load(backend.name)
        for name in ("plan", "build"):
            want = list(inspect.signature(getattr(BuildBackend, name)).parameters)[1:]  # without self
            assert list(inspect.signature(getattr(module, name)).parameters) == want, (backend.name, name)


def docs_table(text: str) -> dict[str, tuple[str, str]]:
    """docs/building.md's backend table: name -> (module, builds with)."""
    return {m["name"]: (m["module"].strip().strip("`"), m["builds"].strip()) for m in _ROW.finditer(text)}


def registry_table() -> dict[str, tuple[str, str]]:
    return {b.name: (b.module, b.builds) for b in BACKENDS}


def test_the_docs_table_is_the_registry() -> None:
    table = docs_table((ROOT / "docs" / "building.md").read_text(encoding="utf-8"))
    assert table.pop(AUTO)[0].startswith("(no module")
    assert table == registry_table()


def test_the_docs_check_fails_on_a_table_missing_a_backend() -> None:
    text = "| `host` | `release.wheelbuild.backends.host` | " + BACKENDS[0].builds + " |\n"
    assert docs_table(text) != registry_table()


def test_backend_choices_on_the_command_line_come_from_the_registry() -> None:
    parser = build_parser()
    for command in ("build", "release"):
        sub = parser.commands[command]  # type: ignore[attr-defined]
        (action,) = [a for a in sub._actions if "--backend" in a.option_strings]
        assert tuple(action.choices) == CHOICES and action.default == AUTO


def backend_lists(source: str) -> list[int]:
    """Lines of ``source`` holding a tuple, list, set or Literal[...] of two or more backend names."""
    out: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            line, elts = node.lineno, list(node.elts)
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple):
            line, elts = node.lineno, list(node.slice.elts)
        else:
            continue
        names = {e.value for e in elts if isinstance(e, ast.Constant) and e.value in (AUTO, *NAMES)}
        if len(names & set(NAMES)) >= 2 or (AUTO in names and names & set(NAMES)):
            out.add(line)
    return sorted(out)


# Still listing the backends by hand: none (a new one fails)
NOT_YET: set[str] = set()


def test_backend_names_are_listed_only_by_the_registry() -> None:
    found = {}
    for path in sorted((ROOT / "release").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel != REGISTRY and (lines := backend_lists(path.read_text(encoding="utf-8"))):
            found[rel] = lines
    assert set(found) == NOT_YET, f"backend names listed outside {REGISTRY}: {found}"


def test_the_list_guard_fails_on_a_list_and_passes_one_name() -> None:
    assert backend_lists('choices=("auto", "host", "container")\n') == [1]
    assert backend_lists('B = Literal["host", "container"]\n') == [1]
    assert backend_lists('if backend == "host":\n    pass\nx = ("host", 1)\n') == []
