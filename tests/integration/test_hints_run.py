"""Every hint runs as printed (issue 33, item 2).

A refusal that names a ``python -m release`` command is run here in the situation that printed it:
a user's own ``--policy`` (an absolute path, not the default rows.toml) and ``--dist`` (a folder in
``tmp_path``), and a wheel outside any dist folder given with ``--wheel``. The printed command is run
as printed, from the same folder, and must move the user forward: it exits 0, and the step that
refused no longer refuses on the same ground. Before, the record-chain refusals named
``python -m release audit ROW`` without the user's options (run as printed it audited another wheel,
or none) and a standalone audit record was "audited as row None".

The build of tinyaxpy's CPU row (host backend, about 2 s with pip's cache warm) is made once.
"""

from __future__ import annotations

import ast
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.proc import repo_env

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
POLICY = str(ROOT / "rows.toml")  # as a user gives it: a path, so every hint must repeat it
ROW = "cpu-py312-x86_64"
HINT = re.compile(r"`(python -m release [^`]+)`")


def release(*argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "release", *argv],
        cwd=cwd,
        env={k: v for k, v in repo_env().items() if not k.startswith("WHEELWRIGHT_POLICY")},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def printed(proc: subprocess.CompletedProcess[str]) -> list[str]:
    """The ``python -m release ...`` commands a refusal names, as printed."""
    return HINT.findall(proc.stderr + proc.stdout)


def run_as_printed(hint: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(hint)
    assert argv[:3] == ["python", "-m", "release"], hint
    return release(*argv[3:], cwd=cwd)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dist folder of the user's with the CPU row's wheel and its build record (built once)."""
    dist = tmp_path_factory.mktemp("hints") / "mydist"
    proc = release("build", ROW, "--policy", POLICY, "--dist", str(dist))
    assert proc.returncode == 0, proc.stderr
    return dist


@pytest.fixture
def dist(built: Path, tmp_path: Path) -> Path:
    """A copy of :func:`built` for one test (its records are the test's to change)."""
    copy = tmp_path / "mydist"
    shutil.copytree(built, copy)
    return copy


def test_smokes_refusal_names_the_audit_of_the_same_wheel(dist: Path) -> None:
    refused = release("smoke", ROW, "--policy", POLICY, "--dist", str(dist))
    assert refused.returncode == 1 and "smoke refused" in refused.stderr, refused.stderr
    (hint,) = printed(refused)
    assert hint == f"python -m release audit {ROW} --policy {POLICY} --dist {dist}"
    ran = run_as_printed(hint)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    (wheel,) = (dist / "cpu").glob("*.whl")
    assert (wheel.parent / f"{wheel.name}.audit.json").is_file()  # the record smoke reads, where it reads it
    again = release("smoke", ROW, "--policy", POLICY, "--dist", str(dist))
    assert "no audit record" not in again.stderr, again.stderr


def test_audits_refusal_of_a_changed_wheel_names_the_build_of_the_same_row(dist: Path) -> None:
    (wheel,) = (dist / "cpu").glob("*.whl")
    with wheel.open("ab") as f:  # the bytes change after the build: the build record no longer binds
        f.write(b"\0")
    refused = release("audit", ROW, "--policy", POLICY, "--dist", str(dist))
    assert refused.returncode == 1 and "changed since it was built" in refused.stderr, refused.stderr
    (hint,) = printed(refused)
    assert hint == f"python -m release build {ROW} --policy {POLICY} --dist {dist}"
    ran = run_as_printed(hint)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    audited = release("audit", ROW, "--policy", POLICY, "--dist", str(dist))
    assert audited.returncode == 0, audited.stdout + audited.stderr


def test_a_missing_wheels_hint_builds_it_where_the_step_looks(tmp_path: Path) -> None:
    empty = tmp_path / "otherdist"
    refused = release("audit", ROW, "--policy", POLICY, "--dist", str(empty))
    assert refused.returncode == 2, refused.stderr
    (hint,) = printed(refused)
    assert hint == f"python -m release build {ROW} --policy {POLICY} --dist {empty}"
    assert run_as_printed(hint).returncode == 0
    assert release("audit", ROW, "--policy", POLICY, "--dist", str(empty)).returncode == 0


def test_smoke_of_a_wheel_audited_standalone_names_the_rows_audit(built: Path, tmp_path: Path) -> None:
    (source,) = (built / "cpu").glob("*.whl")
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    wheel = Path(shutil.copy2(source, downloads / source.name))
    assert release("audit", str(wheel), "--variant", "cpu", "--record").returncode == 0
    refused = release("smoke", ROW, "--wheel", str(wheel), "--policy", POLICY)
    assert refused.returncode == 1, refused.stderr
    assert "row None" not in refused.stderr
    assert "audited standalone, as no row of a policy, not as row cpu-py312-x86_64" in refused.stderr
    (hint,) = printed(refused)
    # the user gave --policy: the hint repeats it (commands/smoke.py hands smoke_step the policy's path)
    assert hint == f"python -m release audit {wheel} --row {ROW} --record --policy {POLICY}"
    ran = run_as_printed(hint)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    again = release("smoke", ROW, "--wheel", str(wheel), "--policy", POLICY)
    assert "refused" not in again.stderr, again.stderr


def test_an_unknown_rows_hint_lists_the_users_policys_rows(tmp_path: Path) -> None:
    wheel = tmp_path / "x-1.0-py3-none-any.whl"
    wheel.write_bytes(b"")
    refused = release("audit", str(wheel), "--row", "zzz", "--policy", POLICY)
    assert refused.returncode == 2, refused.stderr
    (hint,) = printed(refused)
    assert hint == f"python -m release plan --policy {POLICY}"
    ran = run_as_printed(hint)
    assert ran.returncode == 0 and ROW in ran.stdout, ran.stdout + ran.stderr


def test_publishs_refusal_names_the_audit_and_smoke_of_the_same_wheel(dist: Path) -> None:
    """Publish's own record-chain refusals (release/publish/step.py) repeat --policy and --dist:
    run as printed, in order, they make the records publish reads, where it reads them."""
    argv = ("publish", ROW, "--rehearsal", "--check-only", "--policy", POLICY, "--dist", str(dist))
    refused = release(*argv)
    assert refused.returncode == 1 and "not ready" in refused.stderr, refused.stderr
    assert printed(refused) == [
        f"python -m release {step} {ROW} --policy {POLICY} --dist {dist}" for step in ("audit", "smoke")
    ]
    for hint in printed(refused):
        ran = run_as_printed(hint)
        assert ran.returncode == 0, ran.stdout + ran.stderr
    again = release(*argv)
    assert "record-chain" not in again.stderr, again.stderr


def test_the_smoke_steps_refusal_names_the_policy_it_was_given(dist: Path) -> None:
    """smoke_step (release/smoke/run.py) hands its caller's policy to the refusal: without a build
    record to fall back on, the hint still names the user's --policy."""
    from release.core.errors import CheckFailed
    from release.policy.load import load_policy
    from release.policy.matrix import expand
    from release.records import policy_sha256
    from release.smoke.run import smoke_step

    policy = load_policy(POLICY)
    (row,) = [r for r in expand(policy) if r.id == ROW]
    (wheel,) = (dist / "cpu").glob("*.whl")
    (wheel.parent / f"{wheel.name}.build.json").unlink()
    with pytest.raises(CheckFailed) as refused:
        smoke_step(row, policy.project, wheel, {}, policy_sha256=policy_sha256(policy), policy_path=POLICY)
    assert f"`python -m release audit {ROW} --policy {POLICY} --dist {dist}`" in str(refused.value)


def test_a_selection_that_matches_no_row_names_the_plan_of_the_users_policy() -> None:
    refused = release("plan", "zzz", "--policy", POLICY)
    assert refused.returncode == 2, refused.stderr
    (hint,) = printed(refused)
    assert hint == f"python -m release plan --policy {POLICY}"
    ran = run_as_printed(hint)
    assert ran.returncode == 0 and ROW in ran.stdout, ran.stdout + ran.stderr


def test_index_statuss_hint_starts_the_index_it_looked_for(tmp_path: Path) -> None:
    root = tmp_path / "myindex"
    status = release("index", "status", "--root", str(root), "--policy", POLICY)
    assert status.returncode == 0 and '"running": false' in status.stdout, status.stdout + status.stderr
    (hint,) = printed(status)
    assert hint == f"python -m release index start --root {root} --policy {POLICY}"
    ran = run_as_printed(hint)
    try:
        assert ran.returncode == 0, ran.stdout + ran.stderr
        again = release("index", "status", "--root", str(root))
        assert '"running": true' in again.stdout, again.stdout + again.stderr
    finally:
        assert release("index", "stop", "--root", str(root)).returncode == 0


def test_a_missing_wheels_nox_hint_builds_it_where_the_step_looks(tmp_path: Path) -> None:
    """The same refusal's nox form, ``(WHEELWRIGHT_POLICY=P nox -s build-... -- --dist D)``, run as printed."""
    empty = tmp_path / "noxdist"
    refused = release("audit", ROW, "--policy", POLICY, "--dist", str(empty))
    (nox,) = re.findall(r"\((WHEELWRIGHT_[^)]*nox -s [^)]+)\)", refused.stderr)
    assert nox == f"WHEELWRIGHT_POLICY={POLICY} nox -s build-cpu-py312 -- --dist {empty}"
    path = f"{Path(sys.executable).parent}:{repo_env()['PATH']}"  # .venv/bin: where the README's nox is
    ran = subprocess.run(
        ["bash", "-c", nox],
        cwd=ROOT,
        env={**repo_env(), "PATH": path},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert release("audit", ROW, "--policy", POLICY, "--dist", str(empty)).returncode == 0


# Every place in release/ that writes a command into a message (a string, not a docstring, not --help),
# by module and the start of its text: the test of this module that runs it as printed, or why it is
# not run here. A new place fails the guard below until it is listed.
HINT_SITES: dict[tuple[str, str], str] = {
    ("release/cli.py", "python -m release"): "not a hint: the parser's prog",
    (
        "release/hints.py",
        "`python -m release build ",
    ): "test_a_missing_wheels_hint_builds_it_where_the_step_looks",
    ("release/hints.py", "nox -s build-"): "test_a_missing_wheels_nox_hint_builds_it_where_the_step_looks",
    ("release/hints.py", "`python -m release "): "test_smokes_refusal_names_the_audit_of_the_same_wheel, "
    "test_audits_refusal_of_a_changed_wheel_names_the_build_of_the_same_row, "
    "test_index_statuss_hint_starts_the_index_it_looked_for, "
    "test_publishs_refusal_names_the_audit_and_smoke_of_the_same_wheel, "
    "test_smoke_of_a_wheel_audited_standalone_names_the_rows_audit",
    (
        "release/commands/audit.py",
        "python -m release plan",
    ): "test_an_unknown_rows_hint_lists_the_users_policys_rows",
    (
        "release/coverage/run.py",
        ": its wheel was not read (plan --coverage",
    ): "not run: the coverage command's",
    ("release/commands/plan.py", "its GPU dependency's wheel decides it: plan --coverage"): "not run: plan's "
    "coverage column (another engineer's)",
    (
        "release/coverage/jetson.py",
        " (planned here: python -m release build does not build",
    ): "not a hint: says what build does not do",
    (
        "release/policy/matrix.py",
        "python -m release plan",
    ): "test_a_selection_that_matches_no_row_names_the_plan_of_the_users_policy",
    (
        "release/publish/guards/plan.py",
        "python -m release audit ROW",
    ): "not run: ROW a placeholder, used only when a caller gives no rerun= (publish's dist_wheels gives one)",
    (
        "release/publish/guards/readback.py",
        "read it back again (rerun the same command, or python -m release verify)",
    ): ("not run: publish's read-back, which needs a target index that answers wrongly"),
    (
        "release/publish/index/local.py",
        ": no local index is running there (start one: python -m release index start",
    ): ("not run: the local index's, ROOT a placeholder"),
    ("release/publish/index/local.py", "); stop it first (python -m release index stop --root ...)"): (
        "not run: the local index's, '...' a placeholder"
    ),
    (
        "release/publish/index/server.py",
        "python -m release.publish.index.server",
    ): "not a hint: the server's argv",
    (
        "release/publish/step.py",
        " (stop it: python -m release index stop --root ",
    ): "not run: a log line of the rehearsal, run by the docs' index lines (test_docs_commands_run)",
    ("release/wheelbuild/repair/auditwheel_as.py", "python -m release.wheelbuild.repair.auditwheel_as"): (
        "not a hint: the repair wrapper's argv"
    ),
    ("release/wheelbuild/toolchain.py", ": python -m release build "): "not run: a container build "
    "(--backend container), which this machine's tests run in test_container_build.py",
}


def hint_sites() -> set[tuple[str, str]]:
    """Each string of release/ (no docstring, no help text) that names a command: (module, its start)."""
    found: set[tuple[str, str]] = set()
    for path in sorted((ROOT / "release").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        quiet: set[int] = set()
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            scope = isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            if scope and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                quiet.add(id(body[0].value))
            if isinstance(node, ast.keyword) and node.arg in ("help", "description", "epilog"):
                quiet.update(id(n) for n in ast.walk(node.value))
        for node in ast.walk(tree):
            text = node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else ""
            if id(node) not in quiet and ("python -m release" in text or "nox -s" in text):
                found.add((str(path.relative_to(ROOT)), text[:100]))
    return found


def test_every_place_that_prints_a_command_is_run_or_says_why_not() -> None:
    found = hint_sites()
    listed = {(module, start) for module, start in HINT_SITES}
    new = sorted(site for site in found if not any(site[0] == m and site[1].startswith(s) for m, s in listed))
    gone = sorted(
        site for site in listed if not any(f[0] == site[0] and f[1].startswith(site[1]) for f in found)
    )
    assert (new, gone) == ([], []), (
        "list each new hint in HINT_SITES with its test (or why not), drop gone ones"
    )
    tests = {name for name in globals() if name.startswith("test_")}
    for where, how in HINT_SITES.items():
        named = re.findall(r"\btest_\w+", how)
        assert how.startswith(("not run: ", "not a hint: ")) or named, where
        assert set(named) <= tests | {"test_docs_commands_run", "test_container_build"}, (where, named)
