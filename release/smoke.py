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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from release.errors import StepFailed
from release.hashing import sha256_file
from release.matrix import Row
from release.policy import Project
from release.proc import run
from release.toolchain import NO_PIP_CONFIG

SMOKE_RECORD_VERSION = 1

# Runs inside the fresh venv's interpreter. argv: import_name, check "mod:func", sdk "mod:func"|"".
PROBE = r"""
import ctypes, importlib, json, sys
out = {"python": "%d.%d" % sys.version_info[:2], "site": None}
import_name, check, sdk = sys.argv[1], sys.argv[2], sys.argv[3]
def call(spec):
    mod, _, fn = spec.partition(":")
    return getattr(importlib.import_module(mod), fn)()
try:
    mod = importlib.import_module(import_name)
    out["import"] = "ok"
    out["module_file"] = getattr(mod, "__file__", None)
except BaseException as exc:
    out["import"] = "%s: %s" % (type(exc).__name__, exc)
    print(json.dumps(out)); sys.exit(0)
import sysconfig
out["site"] = sysconfig.get_paths()["purelib"]
loaded = set()
with open("/proc/self/maps") as f:
    for line in f:
        parts = line.split(None, 5)
        if len(parts) == 6 and ".so" in parts[5]:
            loaded.add(parts[5].strip())
out["loaded"] = sorted(loaded)
gpu, reason = None, None
try:
    cuda = ctypes.CDLL("libcuda.so.1")
    rc = cuda.cuInit(0)
    if rc != 0:
        reason = "the CUDA driver is present but cuInit failed with error %d (no usable GPU)" % rc
    else:
        n = ctypes.c_int(0)
        cuda.cuDeviceGetCount(ctypes.byref(n))
        if n.value == 0:
            reason = "the CUDA driver reports no GPU"
        else:
            gpu = n.value
except OSError:
    reason = "no CUDA driver (libcuda.so.1 cannot be loaded)"
out["gpus"], out["no_gpu_reason"] = gpu, reason
out["run_check"] = bool(gpu) or sys.argv[4] == "cpu"
if out["run_check"]:
    try:
        out["check"] = call(check)
    except BaseException as exc:
        out["check_error"] = "%s: %s" % (type(exc).__name__, exc)
if sdk:
    try:
        out["sdk"] = call(sdk)
    except BaseException as exc:
        out["sdk_error"] = "%s: %s" % (type(exc).__name__, exc)
print(json.dumps(out, default=str))
"""

CPP_CONSUMER = r"""
#include "{header}"
#include <fstream>
#include <iostream>
#include <string>
int main() {{
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find(".so") != std::string::npos) std::cout << line.substr(line.rfind(' ') + 1) << "\n";
  return 0;
}}
"""


@dataclass(frozen=True)
class Outcome:
    """What the smoke step concluded for one wheel."""

    passed: bool
    executed: bool
    lines: tuple[str, ...]  # human lines, ✓/✗/- prefixed
    libcudart: str | None
    skipped_reason: str | None
    details: Mapping[str, Any] = field(default_factory=dict)


def _within(path: str, folder: str) -> bool:
    p, f = os.path.normpath(path), os.path.normpath(folder)
    return p == f or p.startswith(f + os.sep)


def loaded_cuda_runtime(loaded: Sequence[str]) -> list[str]:
    return sorted({p for p in loaded if os.path.basename(p).startswith("libcudart")})


def evaluate(row: Row, probe: Mapping[str, Any], cpp: Mapping[str, Any] | None = None) -> Outcome:
    """Decide pass/fail from what the probe (and the C++ consumer) reported. Pure."""
    lines: list[str] = []
    ok = True
    if probe.get("import") != "ok":
        return Outcome(
            False,
            False,
            (f"✗ import failed in a fresh venv: {probe.get('import')}",),
            None,
            None,
            dict(probe),
        )
    lines.append(f"✓ installed and imported in a fresh Python {probe.get('python')} venv")
    site = str(probe.get("site"))
    runtimes = loaded_cuda_runtime(probe.get("loaded", []))
    libcudart = runtimes[0] if runtimes else None
    if row.is_cuda:
        wanted = [os.path.join(site, p.installs_to) for p in row.cuda_packages]
        if not runtimes:
            ok = False
            lines.append(
                "✗ no libcudart was loaded by importing the package; the CUDA wheel does not link the runtime"
            )
        for rt in runtimes:
            if any(_within(rt, w) for w in wanted):
                lines.append(f"✓ libcudart came from the environment's CUDA package: {rt}")
            else:
                ok = False
                lines.append(
                    f"✗ libcudart came from {rt}, not from the environment's "
                    f"{', '.join(p.name for p in row.cuda_packages)} ({', '.join(wanted)}); "
                    "the wheel only works where that path exists (check its RPATH/RUNPATH)"
                )
    elif runtimes:
        ok = False
        lines.append(f"✗ the CPU wheel loaded a CUDA runtime: {', '.join(runtimes)}")
    else:
        lines.append("✓ CPU wheel: no CUDA runtime loaded")

    executed = bool(probe.get("run_check"))
    skipped = None
    if not executed:
        skipped = str(probe.get("no_gpu_reason") or "no GPU")
        lines.append(
            f"- no GPU here: execution skipped ({skipped}); install, import and library resolution were checked"
        )
    elif "check_error" in probe:
        ok = False
        lines.append(f"✗ the check computation failed: {probe['check_error']}")
    else:
        result = probe.get("check")
        diff = result.get("max_abs_diff") if isinstance(result, Mapping) else None
        if diff == 0.0:
            where = result.get("device") or result.get("backend") if isinstance(result, Mapping) else None
            lines.append(f"✓ check computation ran on {where}: max |diff| vs CPU reference = 0")
        else:
            ok = False
            lines.append(f"✗ the check computation returned {result!r}; expected max_abs_diff == 0.0")
    if "sdk_error" in probe:
        ok = False
        lines.append(f"✗ the SDK paths could not be read: {probe['sdk_error']}")
    if cpp is not None:
        if cpp.get("error"):
            ok = False
            lines.append(f"✗ a C++ program outside the wheel could not use the SDK: {cpp['error']}")
        else:
            loaded = [str(p) for p in cpp.get("loaded", [])]
            wanted_libs = [f"lib{name}.so" for name in cpp.get("libraries", [])]
            cpp_rt = loaded_cuda_runtime(loaded)
            bad = [
                r
                for r in cpp_rt
                if not any(_within(r, os.path.join(site, p.installs_to)) for p in row.cuda_packages)
            ]
            not_loaded = [lib for lib in wanted_libs if not any(os.path.basename(p) == lib for p in loaded)]
            if not wanted_libs:
                ok = False
                lines.append("✗ the SDK names no library to link; a C++ consumer check needs one")
            elif not_loaded:
                ok = False
                lines.append(f"✗ the C++ consumer did not load the SDK's {', '.join(not_loaded)}")
            elif bad:
                ok = False
                lines.append(f"✗ the C++ consumer loaded libcudart from {bad[0]}, not from the environment")
            elif row.is_cuda and not cpp_rt:
                ok = False
                lines.append(
                    "✗ the C++ consumer loaded no libcudart, but the CUDA SDK must reach the environment's runtime"
                )
            else:
                lines.append("✓ a C++ program outside the wheel compiled, linked and loaded the SDK")
    return Outcome(ok, executed, tuple(lines), libcudart, skipped, dict(probe))


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


__all__ = ["Outcome", "evaluate", "install_args", "smoke_wheel", "write_record"]


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


def check_resolution(row: Row, chosen: str) -> str | None:
    """None when pip's choice is this row's wheel; else what a user would wrongly get. Pure."""
    from release.dist import row_matches_wheel

    if row_matches_wheel(row, chosen):
        return None
    if "+" not in chosen.split("-")[1]:
        return f"pip picked the CPU wheel {chosen} instead of the {row.variant} wheel"
    return f"pip picked {chosen}, not the {row.variant} wheel for {row.python_tag}"
