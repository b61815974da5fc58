"""Every ``python -m release ...`` command line in README.md and docs/*.md runs in a test, or says why
not (issue 24: docs that match the code, run rather than parsed).

The lines are the ones tests/unit/test_docs_commands.py extracts and parses (its ``_commands()``:
synopsis lines with placeholders left out). ``HOW`` classifies each, by its normalized args or a
``re:`` pattern, into exactly one kind:

- ``runs``: run here, as written or with a named fixture substitution (``{wheels}``: the small real
  wheels of tests/fixtures/wheels; ``yourpkg/``: a copy of examples/lazysaxpy), from a copy of the
  policy and its example package (or an empty folder, as the docs say), never from the repository;
- ``network``: run too, marked ``network`` as the repository's other tests that ask PyPI are;
- ``gpu``: not run here (the reason says what it needs);
- ``release-state``: needs a finished build's dist/ or a running index; the index lines run after
  starting one under a temporary root, the rest say why not;
- ``covered-by``: a whole build or rehearsal, run end to end by the named integration test, which
  must hold the ``evidence`` strings (the command and its row or policy).

A guard fails on a documented line no entry classifies (naming the doc file and line) and on an entry
no documented line matches any more."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Literal

import pytest
from helpers.proc import repo_env
from helpers.real_wheels import real_wheel
from helpers.repo import copy_example

ROOT = Path(__file__).resolve().parents[2]
WHEELS = ROOT / "tests" / "fixtures" / "wheels"
GOOD = "{wheels}/fx_good_cu130-1.0.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl"
EMBEDDED = "{wheels}/fx_embedded-1.0.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl"
TIMEOUT_S = 120

pytestmark = pytest.mark.integration

Kind = Literal["runs", "network", "gpu", "release-state", "covered-by"]


@dataclass(frozen=True)
class Need:
    kind: Kind
    why: str = ""  # gpu, release-state: the reason; covered-by: the test file (tests/integration/...)
    argv: str = ""  # runs, network: the line as run, substitutions made ("": as written)
    cwd: Literal["copy", "empty"] = "copy"  # a copy of rows.toml + examples/tinyaxpy (+ yourpkg/), or nothing
    exit: int = 0
    expect: str = ""  # runs, network, release-state run: one fact of stdout + stderr
    evidence: tuple[str, ...] = ()  # covered-by: what the test file holds


def _covered(test: str, *evidence: str, why: str = "") -> Need:
    return Need(
        "covered-by", why=f"tests/integration/{test}" + (f" ({why})" if why else ""), evidence=evidence
    )


GPU_SMOKE = "the device run on a GPU (docs/gpu-smoke.md: the lent H200's runs, carried wheels and wheelhouse)"
NEW_TRAIN = "the CUDA 13.3 train the page walks through adding: no row of this policy matches cu133-py312"

HOW: dict[str, Need] = {
    # runs: here, as written or with a named substitution
    "--help": Need("runs", expect="Exit codes: 0 ok, 1 a check failed, 2 bad input"),
    "--version": Need("runs", expect="wheelwright "),
    "plan": Need("runs", expect="cu130-py312-x86_64 "),
    "plan --json": Need("runs", expect='"id": "cu130-py312-x86_64"'),
    "plan --pr --json": Need("runs", expect='"policy": "rows.toml"'),
    "plan --policy yourpkg/rows.toml": Need("runs", expect="3 rows: 2 CUDA, 1 CPU"),
    "coverage": Need(
        "runs", expect="n/a Jetson Orin (8.7): no JetPack for it runs the generic aarch64 (SBSA) CUDA 12"
    ),
    "trains": Need("runs", expect="CUDA 13.0 (cu130): nvidia-cuda-nvcc=="),
    "channels": Need("runs", expect="routes no dependency to a channel ([[dependency]]); nothing to check"),
    "build cu130-py312-x86_64 --dry-run --backend host": Need(
        "runs", expect="build plan for cu130-py312-x86_64 (cu130), backend: host"
    ),
    "build cu130-py312-x86_64 --policy yourpkg/rows.toml --backend host --dry-run": Need(
        "runs", expect="build plan for cu130-py312-x86_64 (cu130), backend: host"
    ),
    # some.whl: no fixture carries 12.0+PTX, so the good cu130 wheel (8.0;9.0+PTX) fails that claim: exit 1
    'audit some.whl --variant cu130 --gpu-archs "8.0;9.0;12.0+PTX"': Need(
        "runs",
        argv=f'audit {GOOD} --variant cu130 --gpu-archs "8.0;9.0;12.0+PTX"',
        cwd="empty",
        exit=1,
        expect="claims GPU architectures ['80', '90', '120'] but only carries device code for ['80', '90']",
    ),
    # README's first screen: anyone's wheel, the GPUs it must run on
    "audit their.whl --runs-on 8.0,9.0": Need(
        "runs",
        argv=f"audit {GOOD} --runs-on 8.0,9.0",
        cwd="empty",
        expect="every library runs on ['A100', 'H100 / H200'] (--runs-on)",
    ),
    "audit their.whl --runs-on 8.0,9.0 --driver 13.0": Need(
        "runs",
        argv=f"audit {GOOD} --runs-on 8.0,9.0 --driver 13.0",
        cwd="empty",
        expect="every library runs on a CUDA 13.0 driver on ['A100', 'H100 / H200'] (--runs-on)",
    ),
    # rows-toml.md names the option; run on the fixture that embeds a cubin as data, with its claim
    "audit --allow embedded-device-code": Need(
        "runs",
        argv=f'audit {EMBEDDED} --variant cu130 --gpu-archs "8.0;9.0+PTX" --allow embedded-device-code',
        cwd="empty",
        expect="allowed (--allow embedded-device-code)",
    ),
    # network: asks PyPI (or fetches a published wheel into the test-wheel cache)
    "trains --check": Need("network", expect="rows.toml: CUDA trains 12.6, 13.0, 13.2 (newest 13.2)"),
    "audit torchvision-0.29.1-cp311-cp311-manylinux_2_28_x86_64.whl --runs-on 8.0": Need(
        "network",
        argv="audit {torchvision} --runs-on 8.0",
        cwd="empty",
        exit=1,  # an absolute build-machine RPATH, a grafted libcudart, a bundled libnvjpeg (docs/audit.md)
        expect="torchvision.libs/libcudart.faf08d9a.so.13 is the CUDA runtime of CUDA 13",
    ),
    # release-state: a running local index, started by test_the_documented_index_lines_run
    "index status": Need(
        "release-state", why="a running index under .wheelwright/index", expect='"running": true'
    ),
    "index stop": Need("release-state", why="a running index under .wheelwright/index", expect="stopped"),
    "index start --root .wheelwright/rehearsal-index --variants cpu,cu126,cu130,cu132": Need(
        "release-state", why="none (it starts the index)", expect='"simple_url": "http://127.0.0.1:'
    ),
    "index status --root .wheelwright/rehearsal-index": Need(
        "release-state", why="the index started above", expect='"running": true'
    ),
    "index stop --root .wheelwright/rehearsal-index": Need(
        "release-state", why="the index started above", expect="stopped"
    ),
    # release-state, not run
    "audit cu133-py312": Need("release-state", why=f"a built cu133 wheel in dist/ and {NEW_TRAIN}"),
    "build cu133-py312 --backend host": Need("release-state", why=f"a CUDA 13.3 toolchain and {NEW_TRAIN}"),
    # gpu
    "smoke cu133-py312": Need("gpu", why=f"a GPU whose driver runs CUDA 13.3, and {NEW_TRAIN}"),
    r"re:smoke \S+ --policy \S+ --dist \.gpu/dist --wheelhouse \.gpu/wheelhouse": Need("gpu", why=GPU_SMOKE),
    # gpu-smoke.md's `smoke ROW --dist <its dist>` on the H200: the code span wraps after `smoke`
    "smoke": Need("gpu", why=f"{GPU_SMOKE}; without a GPU the smoke of a row is test_smoke.py's"),
    "smoke cu130-py312-x86_64 --policy yourpkg/rows.toml": Need(
        "gpu",
        why="a GPU for the device run (without one the same smoke passes with the run skipped: "
        "test_smoke.py, test_any_package.py)",
    ),
    # covered-by: whole builds and rehearsals, run end to end by an integration test
    "build cu130-py311-aarch64 --backend container": _covered(
        "test_idioms_container.py",
        '"cu130-py311-aarch64"',
        '"build"',
        '"--backend"',
        '"container"',
        why="the command itself (python -m release build ROW --policy ... --backend container), in the arm64 "
        "stand-in image under emulation, for the find_package(CUDAToolkit) idiom; "
        "test_container_build_aarch64.py builds the 3.13 row of the stand-in policy through build_row",
    ),
    "release --rehearsal --policy examples/lazysaxpy/rows.toml": _covered(
        "test_examples_release.py", '"--rehearsal"', '"--policy"', '"lazysaxpy"', why="with --allow-dirty"
    ),
    "release --rehearsal --policy examples/lazysaxpy/rows.toml --allow-dirty": _covered(
        "test_examples_release.py", '"--rehearsal"', '"--allow-dirty"', '"lazysaxpy"'
    ),
    "release --rehearsal --policy examples/torchsaxpy/rows.toml --allow-dirty": _covered(
        "test_examples_release.py", '"--rehearsal"', '"--allow-dirty"', '"torchsaxpy"'
    ),
    "release --rehearsal --policy yourpkg/rows.toml": _covered(
        "test_examples_release.py",
        '"--rehearsal"',
        '"--policy"',
        why="a package's own policy, from its own folder",
    ),
    "release --rehearsal": _covered(
        "test_release_two_rehearsals.py",
        '"release", "release", "--rehearsal"',
        why="one row: no test rehearses the whole matrix",
    ),
    "release --rehearsal --arch all": _covered(
        "test_release_aarch64.py",
        '"--rehearsal"',
        '"--arch"',
        '"aarch64"',
        why="--arch aarch64 and three aarch64 rows: no test rehearses --arch all",
    ),
    "release": _covered("test_release.py", '"release", "release"'),
    "build": _covered("test_any_package.py", 'step(tmp_path, "build"'),
    "build cu130-py312-x86_64 --policy yourpkg/rows.toml --backend host": _covered(
        "test_any_package.py",
        'step(tmp_path, "build", "--policy", str(policy), "--backend", "host", "cu130-py312-x86_64")',
    ),
    "build cpu-py312-x86_64 --policy yourpkg/rows.toml --backend host": _covered(
        "test_any_package.py",
        'step(tmp_path, "build", "--policy", str(policy), "--backend", "host", "cpu-py312-x86_64")',
    ),
    "build cu130-py312-aarch64": _covered(
        "test_build_aarch64.py", 'ROWS["cu130-py312-aarch64"]', why="the build step of that row, in process"
    ),
    "build cu124-py312 --backend host": _covered(
        "test_cuda12_release.py", '"cu124-py312"', why="a rehearsal of the row, which builds it"
    ),
    "audit": _covered("test_audit_fixtures.py", 'python_m("release", "audit"'),
    "audit dist/cu130/yourpkg-*+cu130-*.whl --policy yourpkg/rows.toml": _covered(
        "test_any_package.py", 'step(tmp_path, "audit", "--policy"', why="by row id, not the shell's glob"
    ),
    "smoke cu130-py311-aarch64": _covered(
        "test_release_aarch64.py", '"cu130-py311-aarch64"', why="smoke-tested by the aarch64 rehearsal"
    ),
    "smoke cpu-py313-aarch64": _covered(
        "test_smoke_aarch64_emulated.py",
        'rows["cpu-py313-aarch64"]',
        "smoke_wheel(",
        why="the smoke step, in process",
    ),
    "publish": _covered("test_record_chain.py", '("publish", ("--target", "rehearsal"))'),
    "verify": _covered("test_manifest_verify.py", 'release_main(["verify"'),
    "verify --target NAME": _covered(
        "test_manifest_verify.py", '"--target"', why="NAME: the policy's rehearsal target"
    ),
    "verify --rebuild cu130-py312-x86_64 --manifest tinyaxpy-0.3.0.release.json --public-key release-signing-key.pub": (
        _covered(
            "test_verify_rebuild.py",
            '"--rebuild"',
            '"--manifest"',
            why="--public-key: tests/unit/test_manifest_signing.py",
        )
    ),
}


# The extraction the parse test uses (tests/unit/test_docs_commands.py), loaded by path: tests/unit is
# not a package, and its module names only what its own tests need.
def _parse_test_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "_docs_commands_parse", ROOT / "tests/unit/test_docs_commands.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_PARSE = _parse_test_module()


@dataclass(frozen=True)
class Documented:
    doc: str  # README.md, adding-a-train.md, ...
    line: int
    args: str  # normalized: one space between words

    def __str__(self) -> str:
        where = self.doc if self.doc == "README.md" else f"docs/{self.doc}"
        return f"{where}:{self.line}: python -m release {self.args}"


def _cut(args: str) -> str:
    """A match's args as ``_commands()`` keeps them: up to a comment or a closing parenthesis."""
    return args.split(" #")[0].split(")")[0].strip().rstrip(".,;:")


def _documented() -> list[Documented]:
    """``_commands()``'s lines, each with the line of its doc it was found on: the extraction walks
    each doc's matches in order, so an entry's match is the first one after the previous entry's
    whose args, cut as the extraction cuts them (``_cut``), are the entry's."""
    pattern: re.Pattern[str] = _PARSE.COMMAND
    docs: list[Path] = _PARSE.DOCS
    commands: list[tuple[str, str]] = _PARSE._commands()
    matches = {
        doc.name: [
            (number, m["args"])
            for number, line in _PARSE.logical_lines(doc.read_text(encoding="utf-8"))
            for m in pattern.finditer(line)
        ]
        for doc in docs
    }
    cursor = dict.fromkeys(matches, 0)
    found = []
    for where, args in commands:
        doc = where.split(":", 1)[0]
        at = next(i for i in range(cursor[doc], len(matches[doc])) if _cut(matches[doc][i][1]) == args)
        cursor[doc] = at + 1
        found.append(Documented(doc, matches[doc][at][0], " ".join(args.split())))
    return found


DOCUMENTED = _documented()


def _keys_for(args: str) -> list[str]:
    return [k for k in HOW if k == args or (k.startswith("re:") and re.fullmatch(k[3:], args))]


def _of_kind(*kinds: Kind) -> list[str]:
    """The documented commands (each once) whose entry is of one of ``kinds``."""
    seen: dict[str, None] = {}
    for d in DOCUMENTED:
        keys = _keys_for(d.args)
        if len(keys) == 1 and HOW[keys[0]].kind in kinds:
            seen[d.args] = None
    return list(seen)


def _unclassified(documented: list[Documented]) -> list[str]:
    """The documented lines no entry of ``HOW`` classifies, or more than one does, each with its doc and line."""
    return [
        f"{d} ({len(_keys_for(d.args))} entries of HOW match: give it exactly one)"
        for d in documented
        if len(_keys_for(d.args)) != 1
    ]


def _stale(documented: list[Documented]) -> list[str]:
    """The entries of ``HOW`` no documented line matches any more."""
    return [k for k in HOW if not any(k in _keys_for(d.args) for d in documented)]


def test_every_documented_command_is_classified_once_and_every_entry_is_documented() -> None:
    assert len(DOCUMENTED) >= 30, DOCUMENTED
    assert _unclassified(DOCUMENTED) == []
    assert _stale(DOCUMENTED) == [], "entries of HOW no documented command matches any more"


def test_every_entry_says_what_it_checks_or_why_it_is_not_run() -> None:
    for key, need in HOW.items():
        if need.kind in ("runs", "network"):
            assert need.expect, key
        else:
            assert need.why, key
        if need.kind == "covered-by":
            test = ROOT / need.why.split(" ", 1)[0]
            assert test.is_file(), f"{key}: {test} is gone"
            text = test.read_text(encoding="utf-8")
            missing = [e for e in need.evidence if e not in text]
            assert need.evidence and missing == [], f"{key}: {test.name} no longer holds {missing}"


def test_the_guard_fails_on_a_new_command_and_on_a_stale_entry() -> None:
    """Must fail: a documented line no entry classifies (named with its doc and line), and an entry
    whose documented line is gone; must pass: a new line the ``re:`` entry classifies."""
    new = Documented("gpu-smoke.md", 7, "smoke cu999-py312-x86_64 --frobnicate")
    assert _unclassified([*DOCUMENTED, new]) == [
        "docs/gpu-smoke.md:7: python -m release smoke cu999-py312-x86_64 --frobnicate "
        "(0 entries of HOW match: give it exactly one)"
    ]
    assert _stale([d for d in DOCUMENTED if d.args != "channels"]) == ["channels"]
    like = "smoke cu132-py312-x86_64 --policy x.toml --dist .gpu/dist --wheelhouse .gpu/wheelhouse"
    assert _unclassified([Documented("gpu-smoke.md", 7, like)]) == []


def test_a_run_fails_on_another_exit_code_or_without_its_fact() -> None:
    """Must fail: the exit code the docs imply is not the one the command gave, or the output lacks
    the entry's fact; must pass: both there."""
    need = Need("runs", expect="PASSED")
    for proc in (
        subprocess.CompletedProcess(["audit"], 1, "FAILED: 1 failing finding\n", ""),
        subprocess.CompletedProcess(["audit"], 0, "audited\n", ""),
    ):
        with pytest.raises(AssertionError):
            _check("audit w.whl", need, proc)
    _check("audit w.whl", need, subprocess.CompletedProcess(["audit"], 0, "PASSED: 12 findings\n", ""))


@pytest.fixture(scope="module")
def repo_outputs() -> list[str]:
    """What git sees under the paths a release command writes to, before any command here runs."""
    return _outputs()


def _outputs() -> list[str]:
    paths = ["dist", ".wheelwright", "yourpkg", "examples", "rows.toml", ".gpu"]
    proc = subprocess.run(
        ["git", "status", "--porcelain", "--ignored=matching", "--untracked-files=all", "--", *paths],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return sorted(proc.stdout.splitlines())


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory, repo_outputs: list[str]) -> dict[str, Path]:
    """``copy``: rows.toml and examples/tinyaxpy, and examples/lazysaxpy as ``yourpkg/`` (the porting
    guide's package); ``empty``: a folder with no rows.toml (a standalone audit)."""
    copy = copy_example(tmp_path_factory.mktemp("copy"))
    ignore = shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__")
    shutil.copytree(ROOT / "examples" / "lazysaxpy", copy / "yourpkg", ignore=ignore)
    return {"copy": copy, "empty": tmp_path_factory.mktemp("empty")}


def _run(args: str, need: Need, folders: dict[str, Path]) -> subprocess.CompletedProcess[str]:
    """``python -m release`` with the documented ``args``, or the entry's ``argv`` with its
    substitutions made (``{wheels}``, ``{torchvision}``: fetched into the test-wheel cache)."""
    line = args
    if need.argv:
        subs = {"wheels": str(WHEELS)}
        if "{torchvision}" in need.argv:
            subs["torchvision"] = str(real_wheel("torchvision"))
        line = need.argv.format(**subs)
    argv = shlex.split(line)
    return subprocess.run(
        [sys.executable, "-m", "release", *argv],
        cwd=folders[need.cwd],
        env=repo_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def _check(args: str, need: Need, proc: subprocess.CompletedProcess[str]) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode == need.exit, f"python -m release {args}: exit {proc.returncode}\n{out}"
    assert need.expect in out, f"python -m release {args}: no {need.expect!r} in\n{out}"


RUNS = _of_kind("runs")
NETWORK = _of_kind("network")


@pytest.mark.parametrize("args", RUNS)
def test_a_documented_command_runs(args: str, folders: dict[str, Path]) -> None:
    (key,) = _keys_for(args)
    need = HOW[key]
    proc = _run(args, need, folders)
    _check(args, need, proc)
    if "--json" in args:
        assert json.loads(proc.stdout)["rows"], proc.stdout


@pytest.mark.network
@pytest.mark.parametrize("args", NETWORK)
def test_a_documented_command_that_asks_pypi_runs(args: str, folders: dict[str, Path]) -> None:
    (key,) = _keys_for(args)
    _check(args, HOW[key], _run(args, HOW[key], folders))


INDEX_LINES = [a for a in _of_kind("release-state") if a.startswith("index ")]


@pytest.fixture
def index_stopped(folders: dict[str, Path]) -> Iterator[None]:
    yield
    for root in (".wheelwright/index", ".wheelwright/rehearsal-index"):
        subprocess.run(
            [sys.executable, "-m", "release", "index", "stop", "--root", root],
            cwd=folders["copy"],
            env=repo_env(),
            capture_output=True,
            timeout=TIMEOUT_S,
        )


@pytest.mark.usefixtures("index_stopped")
def test_the_documented_index_lines_run(folders: dict[str, Path]) -> None:
    """The state they need, made cheaply: README's ``index status`` / ``index stop`` after an
    ``index start`` (what a rehearsal leaves running, default root); docs/publishing.md's start,
    status and stop of a rehearsal index under a root of its own, in the order it gives them."""
    assert sorted(INDEX_LINES) == sorted(
        [
            "index status",
            "index stop",
            "index start --root .wheelwright/rehearsal-index --variants cpu,cu126,cu130,cu132",
            "index status --root .wheelwright/rehearsal-index",
            "index stop --root .wheelwright/rehearsal-index",
        ]
    ), INDEX_LINES
    start = Need("release-state", why="the state README's lines need", expect='"simple_url"')
    _check("index start", start, _run("index start --variants cpu,cu130", start, folders))
    for args in ("index status", "index stop", *[a for a in INDEX_LINES if "--root" in a]):
        _check(args, HOW[args], _run(args, HOW[args], folders))
    after = _run("index status", HOW["index status"], folders)
    assert after.returncode == 0 and '"running": false' in after.stdout, after.stdout + after.stderr


def test_the_runs_left_the_repository_as_it_was(repo_outputs: list[str]) -> None:
    """Every command above ran from a copy or an empty folder: nothing new under the paths a release
    command writes to in the repository (dist/, .wheelwright/, ...). Runs last (file order)."""
    assert _outputs() == repo_outputs
