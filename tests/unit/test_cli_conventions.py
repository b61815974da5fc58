"""One command-line tool (issue 24 item 9): ``--version``, a bad flag answered with the subcommand's
own usage, ``$WHEELWRIGHT_POLICY`` honoured by ``python -m release`` as by nox. Through the real
entry point, in a child process."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest
from helpers.proc import python_m, repo_env

from release import __version__

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = next((ROOT / "tests" / "fixtures" / "wheels").glob("fx_good_cpu-*.whl"))
COMMANDS = ("plan", "build", "smoke", "publish", "release", "audit", "verify", "index")


def test_version_is_the_projects() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert __version__ == version
    proc = python_m("release", "--version", env=repo_env(), cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.strip() == f"wheelwright {version}"


@pytest.mark.parametrize("command", COMMANDS)
def test_a_bad_flag_gets_the_subcommands_usage(command: str) -> None:
    args = [command, "start"] if command == "index" else [command]
    proc = python_m("release", *args, "--no-such-flag", env=repo_env(), cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"usage: python -m release {command} "), proc.stderr
    assert f"python -m release {command}: error: unrecognized arguments: --no-such-flag" in proc.stderr


def test_wheelwright_policy_is_honoured_outside_nox(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.toml"
    env = {**repo_env(), "WHEELWRIGHT_POLICY": str(missing)}
    refused = python_m("release", "plan", env=env, cwd=tmp_path)
    assert refused.returncode == 2 and str(missing) in refused.stderr, refused.stderr
    env["WHEELWRIGHT_POLICY"] = str(ROOT / "rows.toml")
    shown = python_m("release", "plan", "cu130-py312-x86_64", env=env, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "cu130-py312-x86_64" in shown.stdout
    # --policy still wins over the variable
    env["WHEELWRIGHT_POLICY"] = str(missing)
    given = python_m("release", "plan", "--policy", str(ROOT / "rows.toml"), env=env, cwd=tmp_path)
    assert given.returncode == 0, given.stderr


@pytest.mark.parametrize(
    ("args", "written"),
    [((), False), (("--gpu-archs", "7.5;8.0"), False), (("--gpu-archs", "7.5;8.0", "--record"), True)],
)
def test_a_standalone_audit_writes_nothing_unless_asked(
    tmp_path: Path, args: tuple[str, ...], written: bool
) -> None:
    """Someone else's wheel, audited standalone from its own folder: nothing is written beside it
    (as ``auditwheel show``) unless --record; an audit against a policy's row writes its record
    (tests/integration/test_audit_fixtures.py: test_record_written_and_accepted_by_publish)."""
    wheel = tmp_path / FIXTURE.name
    shutil.copy2(FIXTURE, wheel)
    proc = python_m("release", "audit", str(wheel), *args, env=repo_env(), cwd=tmp_path, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [wheel.name] + ([f"{wheel.name}.audit.html", f"{wheel.name}.audit.json"] if written else [])
    )


def test_a_hint_repeats_the_users_policy_and_dist_and_the_sessions_arch() -> None:
    """Issue 24 item 9: the command a hint names does what it says for the user who reads it."""
    from helpers.rows import rows_by_id

    from release.hints import build_hint
    from release.records import one_wheel_problem

    rows = rows_by_id()
    plain = build_hint(rows["cu130-py312-x86_64"], Path("dist"), "rows.toml", host="x86_64")
    assert plain == "`python -m release build cu130-py312-x86_64` (nox -s build-cu130-py312)"
    theirs = build_hint(rows["cu130-py312-aarch64"], Path("out"), "ci/policy.toml", host="x86_64")
    assert theirs == (
        "`python -m release build cu130-py312-aarch64 --policy ci/policy.toml --dist out` "
        "(WHEELWRIGHT_ARCH=aarch64 WHEELWRIGHT_POLICY=ci/policy.toml nox -s build-cu130-py312 -- --dist out)"
    )
    said = one_wheel_problem(
        Path("out"), rows["cu130-py312-x86_64"], [], "smoke", policy_path="ci/policy.toml"
    )
    assert said is not None and said.startswith("no wheel for cu130-py312-x86_64 in out/cu130; run ")
    assert "--policy ci/policy.toml --dist out" in said and said.endswith(" before smoke")


def test_a_rehearsal_outside_git_names_the_way_out(tmp_path: Path) -> None:
    """Outside a git repository: bad input (2) naming --allow-dirty, not a missing tool (3)."""
    shutil.copy2(ROOT / "rows.toml", tmp_path / "rows.toml")
    shutil.copytree(ROOT / "examples" / "tinyaxpy", tmp_path / "examples" / "tinyaxpy")
    env = {**repo_env(), "GIT_CEILING_DIRECTORIES": str(tmp_path.parent)}
    proc = python_m("release", "release", "--rehearsal", "cpu-py312", env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "is not in a git repository" in proc.stderr and "--allow-dirty" in proc.stderr
    assert not list(tmp_path.glob("dist/**/*.whl"))


@pytest.mark.parametrize("command", ["audit", "smoke", "publish"])
def test_a_row_without_its_wheel_is_bad_input_in_every_sibling_command(tmp_path: Path, command: str) -> None:
    """Issue 24 item 9: one condition, one exit code. No wheel for the row in dist/ is bad input (2) in
    audit, smoke and publish alike (publish said 1), and each names the command that makes it."""
    shutil.copy2(ROOT / "rows.toml", tmp_path / "rows.toml")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / "dist").mkdir()
    target = ["--rehearsal"] if command == "publish" else []
    proc = python_m(
        "release", command, "cpu-py312-x86_64", *target, "--dist", "dist", env=repo_env(), cwd=tmp_path
    )
    assert proc.returncode == 2, proc.stderr
    assert (
        "no wheel for cpu-py312-x86_64 in dist/cpu; run `python -m release build cpu-py312-x86_64`"
        in proc.stderr
    )
    assert not list((tmp_path / "dist").rglob("*.json"))  # nothing written: no record, no manifest


@pytest.mark.parametrize("command", ["publish", "release"])
def test_publish_and_release_name_their_target_the_same_way(tmp_path: Path, command: str) -> None:
    """Issue 24 item 9: sibling commands agree on defaults. ``publish`` and ``release`` both need
    ``--target NAME`` or ``--rehearsal`` (publish defaulted to the rehearsal target), and both refuse
    ``--rehearsal`` with a target that is not a rehearsal one; ``--rehearsal`` alone is accepted by both
    (it gets as far as the missing wheel, or the rows it would build)."""
    shutil.copy2(ROOT / "rows.toml", tmp_path / "rows.toml")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    extra = ["--publish-only"] if command == "release" else []
    base = ["release", command, "cpu-py312-x86_64", *extra, "--dist", "dist"]
    neither = python_m(*base, env=repo_env(), cwd=tmp_path)
    assert neither.returncode == 2, neither.stderr
    assert (
        "name the target: --target production (whole release) or --rehearsal (a local index)"
        in neither.stderr
    )
    both = python_m(*base, "--rehearsal", "--target", "production", env=repo_env(), cwd=tmp_path)
    assert both.returncode == 2, both.stderr
    assert "--rehearsal publishes only to a rehearsal target; 'production' is not one" in both.stderr
    rehearsal = python_m(*base, "--rehearsal", env=repo_env(), cwd=tmp_path)
    assert rehearsal.returncode == 2, rehearsal.stderr
    assert "no wheel for cpu-py312-x86_64 in dist/cpu" in rehearsal.stderr
