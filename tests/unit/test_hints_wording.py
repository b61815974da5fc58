"""Issue 33's hand-offs in wording (items 2, 4 and 6): messages that read right and hints that name
the user's own options.

"1 rows"; "a aarch64" (an article before a CPU arch's name); the cannot-load finding that still said
"no file of the wheel defines" after the NEEDED-closure rule; the ``libraries`` check's details nested
twice (``details.details``) in the JSON; a row selection's hint without the user's ``--policy``; a
``WHEELWRIGHT_ARCH`` that is a real arch but not one of the policy's, refused without naming the
variable. Each test failed before its change. In process, no build: about 1 s.
"""

from __future__ import annotations

import ast
import contextlib
import io
from dataclasses import replace
from pathlib import Path

import pytest
from helpers.audit import contents, elf, lib

from release import cli
from release.audit.checks import libraries
from release.audit.checks.link_state import cannot_load
from release.audit.claim import claim_expectation
from release.commands.plan import render_plan
from release.core.errors import SelectionError
from release.hints import a_or_an
from release.policy.load import load_policy
from release.policy.matrix import expand, select
from release.publish.channels import ChannelFinding, _describe

ROOT = Path(__file__).resolve().parents[2]
FIXTURE_POLICY = ROOT / "tests" / "fixtures" / "policy.toml"  # matrix.platforms = ["x86_64"]


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_plan_of_one_row_says_one_row() -> None:
    policy = load_policy(str(ROOT / "rows.toml"))
    rows = select(policy, expand(policy), patterns=("cpu-py312-x86_64",))
    assert render_plan(rows).splitlines()[-1] == "1 row: 0 CUDA, 1 CPU"
    assert "2 rows: " in render_plan(expand(policy)[:2])


def test_a_channels_finding_for_aarch64_reads_an_aarch64() -> None:
    finding = ChannelFinding("torch", "https://example.invalid/simple", "aarch64", (), ("x86_64",))
    text = _describe(finding)
    assert "an aarch64 row depending on it" in text and " a aarch64" not in text, text


def _a_before_an_arch(path: Path) -> list[str]:
    """The f-strings of ``path`` that write "a " right before a CPU arch's value (a name with
    platform, arch or host in it): "a aarch64", "a x86_64"."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.JoinedStr):
            continue
        for before, value in zip(node.values, node.values[1:], strict=False):
            if (
                isinstance(before, ast.Constant)
                and isinstance(before.value, str)
                and (before.value.endswith(" a") or before.value.endswith(" a ") or before.value == "a ")
                and isinstance(value, ast.FormattedValue)
                and any(w in ast.unparse(value.value) for w in ("platform", "arch", "host"))
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_message_writes_a_before_a_cpu_arch() -> None:
    found = [site for path in sorted((ROOT / "release").rglob("*.py")) for site in _a_before_an_arch(path)]
    assert found == [], found


@pytest.mark.parametrize(
    ("arch", "said"),
    [("aarch64", "an aarch64"), ("x86_64", "an x86_64"), ("s390x", "an s390x"), ("ppc64le", "a ppc64le"),
     ("riscv64", "a riscv64"), ("i686", "an i686")],
)  # fmt: skip
def test_the_article_is_chosen_from_the_word(arch: str, said: str) -> None:
    assert a_or_an(arch) == said


def test_the_cannot_load_finding_names_the_librarys_needed_closure() -> None:
    rdc = lib("pkg/lib/librdc.so", info=elf(needed=("libc.so.6",), soname="librdc.so"))
    rdc = replace(rdc, link_needs=("__cudaRegisterLinkedBinary_x",))
    text = cannot_load(rdc, "device_code").message
    assert "no file of the wheel defines" not in text, text
    assert (
        "which neither it nor a library of its NEEDED closure (found through its RPATH/RUNPATH, as the "
        "loader finds them) defines" in text
    ), text


@pytest.mark.parametrize("variant", ["cpu", "cu130"])
def test_the_libraries_checks_details_are_not_nested_twice(variant: str) -> None:
    host = lib("pkg/lib/libhost.so", info=elf(needed=("libc.so.6",), soname="libhost.so"))
    exp = claim_expectation(variant=variant, gpu_archs=None, policy=None, runs_on=None)
    (finding,) = libraries.check(contents(host), exp)
    as_json = finding.to_json()["details"]
    assert "details" not in as_json and as_json["elf_files"] == ["pkg/lib/libhost.so"], as_json


def test_no_row_matches_names_the_users_policy_in_its_plan_hint() -> None:
    policy = load_policy(str(FIXTURE_POLICY))
    with pytest.raises(SelectionError) as err:
        select(policy, expand(policy), patterns=("zzz",))
    assert f"`python -m release plan --policy {FIXTURE_POLICY}` lists the row ids" in str(err.value)
    default = load_policy("rows.toml") if Path("rows.toml").is_file() else None
    if default is not None:  # the default policy's hint stays short: plan reads rows.toml itself
        with pytest.raises(SelectionError) as err:
            select(default, expand(default), patterns=("zzz",))
        assert "`python -m release plan` lists the row ids" in str(err.value)


def test_an_arch_the_policy_does_not_build_from_the_environment_names_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WHEELWRIGHT_ARCH", "aarch64")  # a real arch; the fixture policy builds x86_64 only
    for pr in ((), ("--pr",)):
        code, out, err = run("plan", "--policy", str(FIXTURE_POLICY), *pr)
        assert code == 2 and out == "", out
        assert "WHEELWRIGHT_ARCH=aarch64" in err and "unset WHEELWRIGHT_ARCH" in err, (pr, err)
    monkeypatch.delenv("WHEELWRIGHT_ARCH")
    code, _, err = run("plan", "--policy", str(FIXTURE_POLICY), "--arch", "aarch64")
    assert code == 2 and "WHEELWRIGHT_ARCH" not in err, err
