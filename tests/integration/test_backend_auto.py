"""``--backend auto`` never breaks a build it could do; ``--backend container`` needs an engine.

auto builds in the container only when an engine answers ``info`` and already holds the
row's builder image for the row's platform; otherwise it builds on the host and says
which and why in one line, once per run, and it never pulls.

Every test here pins its engines: no engine installed at all (a PATH without docker or
podman), or fake ``docker``/``podman`` scripts on PATH (those tests say "fake" in their
names); the fakes log every call, so a test can prove no image was pulled. Only
``test_default_backend_on_this_machine`` uses this machine's engines, on purpose, and
asserts what auto must do whichever engines work here.
"""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.proc import assert_process_ends
from helpers.rows import rows_by_id

from release.core.errors import ToolError
from release.core.machine import default_cache_dir, find_python
from release.policy.matrix import Row
from release.wheelbuild import engine as engine_module
from release.wheelbuild.engine import (
    EngineProbe,
    ImageProbe,
    Unnamed,
    builder_image,
    choose_backend,
    detect_engine,
    probe_image,
)
from release.wheelbuild.run import build_row

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "rows.toml"
PROJECT = ROOT / "examples" / "tinyaxpy"
ROWS = rows_by_id(POLICY)
CPU, CU126, CU132 = ROWS["cpu-py312-x86_64"], ROWS["cu126-py312-x86_64"], ROWS["cu132-py312-x86_64"]
CACHE = default_cache_dir(os.environ)
NO_DAEMON = "Cannot connect to the Docker daemon at unix:///fake.sock. Is the docker daemon running?"


def _image(row: Row) -> str:
    named = builder_image(row, PROJECT)
    assert isinstance(named, str), named
    return named


def _bin_with_python(folder: Path) -> Path:
    """A PATH folder holding only python3.12 (the rows' Python): no docker, no podman, no nvcc."""
    folder.mkdir(parents=True, exist_ok=True)
    python = find_python("3.12", env=dict(os.environ))
    (folder / "python3.12").symlink_to(python.path)
    return folder


def _fake_engines(folder: Path, *, works: str | None, images: dict[str, str] | None = None) -> Path:
    """Fake ``docker`` and ``podman``: ``works`` names the one whose ``info`` succeeds (or none).

    ``images`` maps the images it holds to their platform (``linux/amd64``). Each call is
    appended to ``calls.log`` beside the scripts.
    """
    _bin_with_python(folder)
    log = folder / "calls.log"
    held = " ".join(f"{shlex.quote(image)}={shlex.quote(p)}" for image, p in (images or {}).items())
    for engine in ("docker", "podman"):
        script = folder / engine
        if engine == works:
            script.write_text(
                f"""#!/bin/sh
echo "{engine} $*" >> {shlex.quote(str(log))}
if [ "$1" = info ]; then echo "fake engine"; exit 0; fi
if [ "$1" = image ] && [ "$2" = inspect ]; then
  for pair in {held}; do
    if [ "${{pair%=*}}" = "$3" ]; then echo "${{pair##*=}}"; exit 0; fi
  done
  echo "Error: No such image: $3" >&2; exit 1
fi
echo "fake {engine}: unexpected call: $*" >&2; exit 99
"""
            )
        else:
            script.write_text(
                f"#!/bin/sh\necho \"{engine} $*\" >> {shlex.quote(str(log))}\necho '{NO_DAEMON}' >&2\nexit 1\n"
            )
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return folder


def _env(path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "WHEELWRIGHT_KEEP_TMP")}
    env["PATH"] = str(path)
    return env


def _dry_run(row: Row, env: dict[str, str], tmp_path: Path, backend: str = "auto") -> None:
    records = build_row(
        row,
        policy_path=POLICY,
        dist_dir=tmp_path / "dist",
        cache_dir=tmp_path / "cache",
        backend=backend,  # type: ignore[arg-type]
        dry_run=True,
        env=env,
    )
    assert records == []


def _calls(folder: Path) -> list[str]:
    log = folder / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


# --------------------------------------------------------------------------- the decision (pure)


def test_choice_is_host_when_asked_whatever_the_engine() -> None:
    decision = choose_backend("host", None, None)
    assert (decision.backend, decision.engine, decision.reason) == ("host", None, "")


def test_choice_without_an_engine() -> None:
    probe = EngineProbe(None, ("docker: not installed", "podman: not installed"))
    auto = choose_backend("auto", probe, None)
    assert auto.backend == "host"
    assert auto.reason == (
        "no container engine works here (docker: not installed; podman: not installed); building on the host"
    )
    with pytest.raises(ToolError) as info:
        choose_backend("container", probe, None)
    assert str(info.value) == (
        "no container engine works here (docker: not installed; podman: not installed); use --backend host"
    )
    assert info.value.return_code == 3


def test_choice_with_an_engine_depends_on_the_image() -> None:
    probe = EngineProbe("podman", ("docker: not installed",))
    image = "pytorch/manylinux2_28-builder:cuda13.0"
    absent = choose_backend("auto", probe, ImageProbe(image, "linux/amd64", False, ""))
    assert absent.backend == "host" and absent.engine is None
    assert absent.reason == (
        f"podman has no local linux/amd64 copy of {image}; building on the host "
        "(auto never pulls; --backend container does)"
    )
    other = choose_backend(
        "auto", probe, ImageProbe(image, "linux/amd64", False, "the local copy is linux/arm64")
    )
    assert other.backend == "host" and "(the local copy is linux/arm64)" in other.reason
    present = choose_backend("auto", probe, ImageProbe(image, "linux/amd64", True, ""))
    assert (present.backend, present.engine) == ("container", "podman")
    assert present.reason == f"podman holds {image} (linux/amd64) locally; building in the container"
    unnamed = choose_backend("auto", probe, Unnamed("the project chooses the image"))
    assert (
        unnamed.backend == "host" and "the project chooses the image; building on the host" in unnamed.reason
    )
    # asked for, the container needs only the engine: cibuildwheel pulls the image
    asked = choose_backend("container", probe, None)
    assert (asked.backend, asked.engine, asked.reason) == ("container", "podman", "")


def test_cpu_rows_name_cibuildwheels_pinned_default_image(tmp_path: Path) -> None:
    image = _image(CPU)
    assert image.startswith("quay.io/pypa/manylinux_2_28_x86_64@sha256:")
    assert _image(CU126) == "pytorch/manylinux2_28-builder:cuda12.6"
    project = tmp_path / "p"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        '[tool.cibuildwheel.linux]\nmanylinux-x86_64-image = "manylinux_2_34"\n', encoding="utf-8"
    )
    named = builder_image(CPU, project)
    assert isinstance(named, Unnamed) and "[tool.cibuildwheel] chooses the CPU row's image" in named.why


# --------------------------------------------------------------------------- no engine


def test_auto_without_any_engine_builds_on_the_host_and_says_so_once(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    env = _env(_bin_with_python(tmp_path / "bin"))
    _dry_run(CPU, env, tmp_path)
    _dry_run(CU132, env, tmp_path)
    out, err = capfd.readouterr()
    line = (
        "no container engine works here (docker: not installed; podman: not installed); building on the host"
    )
    assert err.count(line) == 1, err
    assert out.count("backend: host") == 2
    assert not (tmp_path / "dist").exists() and not (tmp_path / "cache").exists()


def test_container_without_any_engine_fails_naming_both(tmp_path: Path) -> None:
    env = _env(_bin_with_python(tmp_path / "bin"))
    with pytest.raises(ToolError) as info:
        _dry_run(CU126, env, tmp_path, backend="container")
    assert str(info.value) == (
        "no container engine works here (docker: not installed; podman: not installed); use --backend host"
    )
    assert info.value.return_code == 3


def test_fake_engines_without_a_daemon_auto_builds_on_the_host(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    fake = _fake_engines(tmp_path / "bin", works=None)
    env = _env(fake)
    _dry_run(CPU, env, tmp_path)
    _dry_run(CU132, env, tmp_path)
    out, err = capfd.readouterr()
    line = (
        f"no container engine works here (docker info: exit 1: {NO_DAEMON}; podman info: exit 1: {NO_DAEMON}); "
        "building on the host"
    )
    assert err.count(line) == 1, err
    assert out.count("backend: host") == 2 and "TINYAXPY_VARIANT=cpu" in out
    # each engine was asked once for the whole run, nothing else
    assert _calls(fake) == ["docker info", "podman info"]
    with pytest.raises(
        ToolError, match=r"^no container engine works here \(docker info: exit 1: Cannot connect"
    ):
        _dry_run(CU126, env, tmp_path, backend="container")


# --------------------------------------------------------------------------- engine, image absent or present


def test_fake_engine_without_the_image_builds_on_the_host_and_pulls_nothing(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    fake = _fake_engines(tmp_path / "bin", works="podman")
    env = _env(fake)
    _dry_run(CPU, env, tmp_path)
    _dry_run(CPU, env, tmp_path)  # the same row again: nothing asked or said twice
    _dry_run(CU132, env, tmp_path)
    out, err = capfd.readouterr()
    cpu_image, cu132_image = _image(CPU), _image(CU132)
    for image in (cpu_image, cu132_image):
        line = (
            f"podman has no local linux/amd64 copy of {image}; building on the host "
            "(auto never pulls; --backend container does)"
        )
        assert err.count(line) == 1, err
    assert out.count("backend: host") == 3
    fmt = "--format {{.Os}}/{{.Architecture}}"
    assert _calls(fake) == [
        "docker info",
        "podman info",
        f"podman image inspect {cpu_image} {fmt}",
        f"podman image inspect {cu132_image} {fmt}",
    ]
    assert not any("pull" in call for call in _calls(fake))


@pytest.mark.parametrize(
    ("row", "platform", "said", "planned"),
    [
        pytest.param(
            CPU,
            "linux/arm64",
            "docker has no local linux/amd64 copy of {image} (the local copy is linux/arm64)",
            ("backend: host",),
            id="another-platform-builds-on-the-host",
        ),
        pytest.param(
            CU126,
            "linux/amd64",
            "docker holds {image} (linux/amd64) locally; building in the container",
            (
                "backend: container",
                "CIBW_BUILD=cp312-manylinux_x86_64",
                "CIBW_CONTAINER_ENGINE=docker",
                "CIBW_MANYLINUX_X86_64_IMAGE={image}",
                "-m cibuildwheel --platform linux --output-dir",
            ),
            id="the-image-builds-in-the-container",
        ),
    ],
)
def test_fake_engine_holding_the_image(
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    row: Row,
    platform: str,
    said: str,
    planned: tuple[str, ...],
) -> None:
    """auto builds in the container only with a local copy for the row's platform: cibuildwheel
    would pull over a local copy of another platform, so auto does not use that one."""
    image = _image(row)
    fake = _fake_engines(tmp_path / "bin", works="docker", images={image: platform})
    _dry_run(row, _env(fake), tmp_path)
    out, err = capfd.readouterr()
    assert err.count(said.format(image=image)) == 1
    for line in planned:
        assert line.format(image=image) in out
    assert not (tmp_path / "dist").exists()
    assert not any("pull" in call for call in _calls(fake))


def test_fake_engine_container_asked_for_checks_no_image(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """--backend container leaves the image to cibuildwheel (it pulls what is missing)."""
    fake = _fake_engines(tmp_path / "bin", works="podman")
    _dry_run(CU126, _env(fake), tmp_path, backend="container")
    out, err = capfd.readouterr()
    assert "backend: container" in out and "CIBW_CONTAINER_ENGINE=podman" in out
    assert "locally" not in err and "on the host" not in err  # nothing to explain: the user chose
    assert _calls(fake) == ["docker info", "podman info"]


def test_fake_engine_that_hangs_is_stopped_and_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An engine whose ``info`` never returns is given up on after the probe's limit."""
    folder = _bin_with_python(tmp_path / "bin")
    script = folder / "docker"
    pid_file = tmp_path / "sleep.pid"
    script.write_text(f"#!/bin/sh\n{shutil.which('sleep')} 600 &\necho $! > {pid_file}\nwait\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(engine_module, "PROBE_TIMEOUT_S", 1.0)
    probe = detect_engine(_env(folder))
    assert probe.engine is None
    # what the engine started was stopped with it
    assert_process_ends(int(pid_file.read_text()), "the engine's child")
    assert probe.reasons == (
        f"docker info: `{script} info` timed out after 1 s and was stopped (with every process it started)",
        "podman: not installed",
    )


# --------------------------------------------------------------------------- this machine, on purpose


def test_default_backend_on_this_machine(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """The default backend, with this machine's engines, builds the CPU row, and pulls nothing.

    With a working engine that holds cibuildwheel's pinned CPU image it builds in the
    container; in every other case (no engine, a CLI without a daemon, the image absent)
    it builds on the host and says why once.
    """
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "WHEELWRIGHT_KEEP_TMP")}
    probe = detect_engine(env)
    image = _image(CPU)
    held = probe.engine is not None and probe_image(probe.engine, image, CPU.platform, env).present
    (record,) = build_row(CPU, policy_path=POLICY, dist_dir=tmp_path / "dist", cache_dir=CACHE, env=env)
    err = capfd.readouterr().err
    assert record.wheel.name == f"tinyaxpy-0.3.0-cp312-cp312-manylinux_2_28_{CPU.platform}.whl"
    backend = "container" if held else "host"
    assert f'"backend": "{backend}"' in record.record.read_text()
    if held:
        assert err.count(f"holds {image} (linux/amd64) locally; building in the container") == 1
    elif probe.engine is None:
        assert err.count(f"no container engine works here ({probe.explain()}); building on the host") == 1
    else:
        assert err.count(f"{probe.engine} has no local linux/amd64 copy of {image}") == 1
    print(f"default backend here: {backend} (engine: {probe.engine or 'none'})", file=sys.stderr)


# --------------------------------------------------------------------------- from any folder


def _run(argv: list[str], *, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)


def _build_command(policy: Path, dist: Path) -> list[str]:
    return [sys.executable, "-m", "release", "build", "cu130-py312-x86_64", "--backend", "container",
            "--policy", str(policy), "--dist", str(dist)]  # fmt: skip


def test_fake_engine_container_build_from_any_folder_reaches_the_engine(tmp_path: Path) -> None:
    """``build ROW --backend container --policy /elsewhere/rows.toml`` run from a third folder: cibuildwheel
    runs in the project's folder, so it passes its ``package_dir must be inside the working directory`` check
    and asks the (fake) engine to start the container; the same cibuildwheel handed the project from another
    working directory, as wheelwright did before, stops at that check."""
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(
        PROJECT, elsewhere / "examples" / "tinyaxpy", ignore=shutil.ignore_patterns("build", "*.egg-info")
    )
    policy = elsewhere / "rows.toml"
    shutil.copyfile(POLICY, policy)
    here = tmp_path / "somewhere-else"
    here.mkdir()
    fake = _fake_engines(tmp_path / "bin", works="podman")
    git = shutil.which("git")
    assert git is not None, "git is needed (a build reads SOURCE_DATE_EPOCH from it)"
    (fake / "git").symlink_to(git)
    env = {**_env(fake), "PYTHONPATH": str(ROOT)}
    done = _run(_build_command(policy, tmp_path / "dist"), cwd=here, env=env)
    said = done.stdout + done.stderr
    assert done.returncode != 0, said  # the fake engine starts no container
    assert "package_dir must be inside the working directory" not in said
    assert any(call.startswith("podman") and "info" not in call for call in _calls(fake)), said
    # the must-fail twin: cibuildwheel itself, handed the project from another working directory
    old = _run(
        [
            sys.executable,
            "-m",
            "cibuildwheel",
            "--platform",
            "linux",
            "--output-dir",
            str(tmp_path / "w"),
            str(elsewhere / "examples" / "tinyaxpy"),
        ],
        cwd=here,
        env={**env, "CIBW_CONTAINER_ENGINE": "podman", "CIBW_BUILD": "cp312-manylinux_x86_64"},
    )
    assert (
        old.returncode != 0 and "package_dir must be inside the working directory" in old.stdout + old.stderr
    )
