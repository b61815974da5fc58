"""Smoke: install a wheel the way a user will, in a fresh venv, import it and run it.

Decisions are pure (:func:`evaluate`), effects are in :func:`smoke_wheel`. The probe
runs inside the fresh venv and reports, from the process itself (``/proc/self/maps``),
which ``libcudart`` it loaded: this machine has a CUDA runtime in its loader cache, so
a wheel with a wrong RPATH imports fine here and fails for every user. Without a GPU
the device computation is skipped, and the record says so: never a silent pass.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from release.core.errors import StepFailed
from release.core.hashing import sha256_file
from release.core.pip import NO_PIP_CONFIG
from release.core.proc import run
from release.policy.matrix import Row
from release.policy.model import Project
from release.smoke.evaluate import Outcome, evaluate
from release.smoke.probe import CPP_CONSUMER, PROBE

SMOKE_RECORD_VERSION = 1


def pip_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """An environment that ignores this machine's pip configuration (constraints, local indexes)."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if not k.startswith("PIP_")}
    return {**env, **NO_PIP_CONFIG}


def install_args(
    wheel: Path | None,
    requirement: str | None,
    *,
    index_url: str | None,
    extra_index_urls: Sequence[str] = (),
    find_links: Sequence[Path] = (),
) -> list[str]:
    """The pip install arguments a user would type (pure)."""
    args = ["install", "--isolated", "--no-input", "--quiet"]
    if index_url:
        args += ["--index-url", index_url]
    for url in extra_index_urls:
        args += ["--extra-index-url", url]
    for folder in find_links:
        args += ["--find-links", str(folder)]
    args.append(str(wheel) if wheel is not None else str(requirement))
    return args


def smoke_wheel(
    row: Row,
    project: Project,
    wheel: Path,
    python: Path,
    *,
    index_url: str | None = None,
    extra_index_urls: Sequence[str] = (),
    workdir: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Outcome:
    """Fresh venv with ``python``, install ``wheel`` and its dependencies, probe, judge."""
    base = dict(os.environ if env is None else env)
    keep = base.get("WHEELWRIGHT_KEEP_TMP") == "1"
    wheel = wheel.resolve()  # pip runs in the temporary folder
    tmp = Path(tempfile.mkdtemp(prefix=f"ww-smoke-{row.id}-", dir=workdir))
    try:
        venv = tmp / "venv"
        _log(row, f"creating a fresh venv with {python}")
        run([str(python), "-m", "venv", str(venv)], check=True)
        vpy = venv / "bin" / "python"
        _log(row, f"pip install {wheel.name} and its dependencies")
        run(
            [
                str(vpy),
                "-m",
                "pip",
                *install_args(wheel, None, index_url=index_url, extra_index_urls=extra_index_urls),
            ],
            env=pip_env(base),
            check=True,
            cwd=tmp,
        )
        _log(row, f"importing {project.import_name} and running {project.check}")
        clean = {k: v for k, v in base.items() if k not in ("LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHOME")}
        result = run(
            [str(vpy), "-c", PROBE, project.import_name, project.check, project.sdk or "", row.variant],
            env=clean,
            cwd=tmp,
            check=True,
        )
        try:
            probe: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            raise StepFailed(
                f"the smoke probe printed no report (stdout {result.stdout[-300:]!r}, stderr {result.stderr[-300:]!r})"
            ) from None
        sdk = probe.get("sdk")
        if project.sdk and "sdk_error" not in probe and not isinstance(sdk, dict):
            probe["sdk_error"] = (
                f"{project.sdk} returned {type(sdk).__name__}, not a dict of include_dir/lib_dir/libraries"
            )
        cpp = _cpp_consumer(sdk, tmp, clean) if isinstance(sdk, dict) else None
        return evaluate(row, probe, cpp)
    finally:
        if keep:
            print(f"smoke: kept {tmp} (WHEELWRIGHT_KEEP_TMP=1)", file=sys.stderr)
        else:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)


def _cpp_consumer(sdk: Mapping[str, Any], tmp: Path, env: Mapping[str, str]) -> dict[str, Any]:
    """Compile, link and run a C++ program against the installed SDK, outside the wheel."""
    try:
        header = str(sdk["header"])
        src = tmp / "consumer.cpp"
        src.write_text(CPP_CONSUMER.format(header=header), encoding="utf-8")
        exe = tmp / "consumer"
        libs = [f"-l{name}" for name in sdk.get("libraries", [])]
        run(
            ["g++", "-std=c++17", str(src), "-o", str(exe), f"-I{sdk['include_dir']}", f"-L{sdk['lib_dir']}",
             "-Wl,--no-as-needed", *libs, f"-Wl,-rpath,{sdk['lib_dir']}"],
            check=True,
        )  # fmt: skip
        out = run([str(exe)], env=env, check=True)
        return {"loaded": out.stdout.split(), "libraries": list(sdk.get("libraries", []))}
    except (StepFailed, KeyError) as exc:
        return {"error": str(exc)}


def _log(row: Row, message: str) -> None:
    print(f"==> [{row.id}] smoke: {message}", file=sys.stderr, flush=True)


def write_record(wheel: Path, row: Row, outcome: Outcome) -> Path:
    """``<wheel>.smoke.json`` beside the wheel, bound to its sha256."""
    record = {
        "version": SMOKE_RECORD_VERSION,
        "wheel": wheel.name,
        "sha256": sha256_file(wheel),
        "row": row.id,
        "passed": outcome.passed,
        "executed": outcome.executed,
        "skipped_reason": outcome.skipped_reason,
        "libcudart": outcome.libcudart,
        "lines": list(outcome.lines),
        "check": outcome.details.get("check"),
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    path = wheel.with_name(wheel.name + ".smoke.json")
    tmp = path.with_suffix(".tmp")
    try:
        tmp.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        raise StepFailed(f"cannot write the smoke record {path}: {exc.strerror}") from None
    return path


def resolved_wheel(
    python: Path,
    requirement: str,
    *,
    index_url: str,
    extra_index_urls: Sequence[str] = (),
    workdir: Path | None = None,
) -> str:
    """The wheel file name pip picks for ``requirement`` with these indexes, as a user's pip would."""
    tmp = Path(tempfile.mkdtemp(prefix="ww-resolve-", dir=workdir))
    try:
        args = [
            str(python), "-m", "pip", "download", "--no-deps",
            "--only-binary=:all:", "--isolated", "--no-input", "--quiet", "-d", str(tmp / "got"),
            "--index-url", index_url,
        ]  # fmt: skip
        for url in extra_index_urls:
            args += ["--extra-index-url", url]
        run([*args, requirement], env=pip_env(), check=True)
        got = sorted(p.name for p in (tmp / "got").glob("*.whl"))
        if len(got) != 1:
            raise StepFailed(f"pip downloaded {got} for {requirement}; expected one wheel")
        return got[0]
    finally:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
