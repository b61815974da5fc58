"""The small ones of issue 33 item 6, each as a newcomer meets it, through ``release.cli.main`` in process.

``trains`` reads ``$WHEELWRIGHT_POLICY``; a ``WHEELWRIGHT_*`` value no command can take is an error
naming the variable; a command run where there is no policy leaves no ``dist/.wheelwright.lock``;
``audit --help`` lists exit 3; ``--help`` lists the commands in the order of a release; no reST
markup in a command's ``--help``; "1 row", not "1 rows".
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from release import cli

ROOT = Path(__file__).resolve().parents[2]
FIXTURE_POLICY = ROOT / "tests" / "fixtures" / "policy.toml"  # one train: CUDA 13.0, host builds


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(list(argv))
        except SystemExit as exc:  # --help
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def test_trains_reads_the_policy_the_environment_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("WHEELWRIGHT_POLICY", str(FIXTURE_POLICY))
    code, out, err = run("trains")
    assert (code, out) == (0, "CUDA 13.0 (cu130): no PyPI toolchain; x86_64: host\n"), err


@pytest.mark.parametrize(
    ("name", "value"),
    [("WHEELWRIGHT_ARCH", "sparc"), ("WHEELWRIGHT_CPP_CACHE", "maybe"), ("WHEELWRIGHT_KEEP_TMP", "yes")],
)
def test_a_bad_environment_value_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv(name, value)
    code, out, err = run("plan")
    assert code == 2 and out == "", out
    assert err.startswith(f"error: {name}={value!r}: give "), err


@pytest.mark.parametrize(("name", "value"), [("WHEELWRIGHT_ARCH", "all"), ("WHEELWRIGHT_CPP_CACHE", "0")])
def test_a_good_environment_value_passes(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv(name, value)
    assert run("plan")[0] == 0


@pytest.mark.parametrize(
    "argv", [("build",), ("smoke",), ("publish",), ("release",), ("audit", "cpu-py312-x86_64")]
)
def test_no_lock_is_left_where_no_policy_was_found(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, argv: tuple[str, ...]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WHEELWRIGHT_POLICY", raising=False)
    code, _out, err = run(*argv)
    assert code == 2, err
    assert "rows.toml" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no dist/, no dist/.wheelwright.lock


def test_audit_help_lists_every_exit_code() -> None:
    code, out, _ = run("audit", "--help")
    text = " ".join(out.split())
    assert code == 0 and "Exit 0 all passed, 1 findings, 2 bad input, 3 a tool missing" in text


def test_help_lists_the_commands_in_the_order_of_a_release() -> None:
    _, out, _ = run("--help")
    listed = re.findall(r"^    (\w+)\s", out, flags=re.M)
    assert listed[:7] == ["plan", "build", "audit", "smoke", "publish", "verify", "release"], listed


@pytest.mark.parametrize("command", ["index", "audit", "trains", "verify", "publish", "build", "smoke"])
def test_no_rest_markup_in_a_commands_help(command: str) -> None:
    _, out, _ = run(command, "--help")
    assert "``" not in out and ":func:" not in out and ":mod:" not in out, out


def test_one_row_is_one_row(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.delenv("WHEELWRIGHT_ARCH", raising=False)
    code, _, err = run("matrix", "cpu-py312-x86_64", "--output", str(tmp_path / "m.json"))
    assert code == 0 and "the matrix of 1 row to" in err, err
