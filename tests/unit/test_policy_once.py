"""The policy flows down once: only the commands load rows.toml (the pipeline is handed the Policy they
loaded); which dependencies concern a row is answered by one function (``Policy.dependencies_for``) and a
row's audit expectation is made by one (``release.audit.claim.row_expectation``). Read with ``ast``."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from helpers.rows import rows_by_id

from release.audit.claim import row_expectation
from release.audit.model import Expectation
from release.policy.load import load_policy

ROOT = Path(__file__).resolve().parents[2]
RELEASE = ROOT / "release"
# Who may call load_policy: the command layer, the loader's own module, and the audit command's options,
# which call the loader the command hands them (a parameter named load_policy, not the import).
LOADERS = ("release/commands/", "release/policy/load.py", "release/audit/options.py")
# Callers still holding only a path, each with its reason; a new one fails.
NOT_YET = {
    # a caller that gives build_row/plan_row a path and no Policy (tests)
    "release/wheelbuild/run.py",
}
# Dependency.applies_to(variant, platform) is asked only by Policy.dependencies_for (a new caller fails)
APPLIES_NOT_YET: set[str] = set()


def _called(source: str, name: str, *, args: int | None = None) -> bool:
    """Whether ``source`` calls a function or method named ``name`` (with ``args`` positional arguments)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            called = (
                func.id
                if isinstance(func, ast.Name)
                else func.attr
                if isinstance(func, ast.Attribute)
                else None
            )
            if called == name and (args is None or len(node.args) == args):
                return True
    return False


def _callers(name: str, *, args: int | None = None) -> set[str]:
    out = set()
    for path in sorted(RELEASE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if _called(path.read_text(encoding="utf-8"), name, args=args):
            out.add(rel)
    return out


def test_only_the_commands_load_the_policy() -> None:
    found = {p for p in _callers("load_policy") if not p.startswith(LOADERS)}
    assert found == NOT_YET, f"load_policy called outside the commands: {sorted(found - NOT_YET)}"


def test_one_function_says_which_dependencies_concern_a_row() -> None:
    found = _callers("applies_to", args=2) - {"release/policy/model.py"}
    assert found <= APPLIES_NOT_YET, f"Dependency.applies_to asked outside dependencies_for: {sorted(found)}"


def test_the_guards_catch_what_they_guard() -> None:
    assert _called("from release.policy.load import load_policy\npolicy = load_policy(path)\n", "load_policy")
    assert _called("import release.policy.load as l\nl.load_policy(p)\n", "load_policy")
    assert not _called("def load_policy(path): ...\n", "load_policy")
    assert _called("x = [d for d in deps if d.applies_to(v, p)]\n", "applies_to", args=2)
    assert not _called("rule.applies_to(platform)\n", "applies_to", args=2)  # a channel rule's: one argument


def test_dependencies_for_is_the_matrix_answer() -> None:
    policy = load_policy(ROOT / "rows.toml")
    for row in (r for r in rows_by_id(ROOT / "rows.toml").values() if r.train):
        deps = policy.dependencies_for(row.variant, row.platform)
        assert tuple(dict.fromkeys(d.package for d in deps)) == row.channels


def test_row_expectation_is_the_rows_claim_with_the_index_limit_and_the_policy_digest() -> None:
    row = rows_by_id(ROOT / "rows.toml")["cu130-py312-x86_64"]
    exp = row_expectation(row, policy_sha256="ab" * 32, max_wheel_mib=2048)
    assert exp == dataclasses.replace(Expectation.from_row(row, max_wheel_mib=2048), policy_sha256="ab" * 32)
    assert row_expectation(row).policy_sha256 is None and row_expectation(row).max_wheel_mib is None
