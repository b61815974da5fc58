"""The programs the smoke step runs (the probe, inside the fresh venv; the C++ SDK consumer), and
the pure reading of what a failing probe left behind: the traceback of the project's code only.

The probe is written to a file (:data:`PROBE_FILE`) and run from there, so a crash names that
file, not a 70-line ``-c`` argument; its own frames are cut from every traceback shown.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping, Sequence
from typing import Any

PROBE_FILE = "wheelwright_probe.py"
PHASE_MARK = "wheelwright-probe-phase: "  # on stderr before each phase: names where a crash happened
TRACEBACK_INDENT = "    "

# Runs inside the fresh venv's interpreter, from PROBE_FILE.
# argv: import_name, check "mod:func"|"" (none: import and library load only), sdk "mod:func"|"",
# variant, libraries: a JSON file listing the shipped libraries to load after the import|"".
PROBE = r"""
import ctypes, faulthandler, importlib, json, re, sys, traceback
faulthandler.enable()  # a crash in the project's code prints its Python stack to stderr
HERE = __file__
out = {"python": "%d.%d" % sys.version_info[:2], "site": None}
import_name, check, sdk, variant, libraries = sys.argv[1:6]
def phase(name):
    sys.stderr.write("wheelwright-probe-phase: " + name + "\n")
    sys.stderr.flush()
def error(exc):
    return "%s: %s" % (type(exc).__name__, exc)
def project_traceback(exc):
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if f.filename != HERE and not f.filename.startswith("<frozen importlib")]
    text = "".join(traceback.format_list(frames)) + "".join(traceback.format_exception_only(type(exc), exc))
    return "Traceback (most recent call last):\n" + text if frames else text
def call(spec):
    mod, _, fn = spec.partition(":")
    return getattr(importlib.import_module(mod), fn)()
def attempt(key, verb, spec):  # out[key]: what spec returned, else key_error and key_traceback
    phase(verb + " " + spec)
    try:
        out[key] = call(spec)
    except BaseException as exc:
        out[key + "_error"] = error(exc)
        out[key + "_traceback"] = project_traceback(exc)
def maps():
    found = set()
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and ".so" in parts[5]:
                found.add(parts[5].strip())
    return sorted(found)
phase("import " + import_name)
try:
    mod = importlib.import_module(import_name)
    out["import"] = "ok"
    out["module_file"] = getattr(mod, "__file__", None)
except BaseException as exc:
    out["import"] = error(exc)
    out["import_traceback"] = project_traceback(exc)
    print(json.dumps(out)); sys.exit(0)
import sysconfig
out["site"] = sysconfig.get_paths()["purelib"]
out["loaded_by_import"] = maps()
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
            dev, name, api = ctypes.c_int(0), ctypes.create_string_buffer(256), ctypes.c_int(0)
            if cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0 and cuda.cuDeviceGetName(name, 256, dev) == 0:
                out["gpu_name"] = name.value.decode(errors="replace")
            if cuda.cuDriverGetVersion(ctypes.byref(api)) == 0:
                out["driver_cuda"] = "%d.%d" % (api.value // 1000, api.value % 1000 // 10)
            try:
                with open("/proc/driver/nvidia/version") as f:
                    m = re.search(r"Kernel Module(?:\s+for\s+\S+)?\s+([0-9]+(?:\.[0-9]+)+)", f.read())
                out["driver_version"] = m.group(1) if m else None
            except OSError:
                out["driver_version"] = None
            if not out["driver_version"] and out.get("driver_cuda"):
                out["driver_version"] = "CUDA " + out["driver_cuda"] + " driver"
except OSError:
    reason = "no CUDA driver (libcuda.so.1 cannot be loaded)"
out["gpus"], out["no_gpu_reason"] = gpu, reason
if libraries:
    with open(libraries) as f:
        shipped = json.load(f)
    for lib in shipped:
        if lib.get("problem"):
            continue
        phase("load " + lib["member"])
        try:
            ctypes.CDLL(lib["path"])
            lib["error"] = None
        except OSError as exc:
            lib["error"] = str(exc)
    out["libraries"] = shipped
out["no_check"] = not check
out["run_check"] = bool(check) and (bool(gpu) or variant == "cpu")
if out["run_check"]:
    attempt("check", "run", check)
if sdk:
    attempt("sdk", "call", sdk)
out["loaded"] = maps()
phase("report")
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

# the ✗ line of each probe error (as release.smoke.evaluate words it) and its traceback key
_TRACEBACKS = (
    ("✗ import failed", "import_traceback"),
    ("✗ the check computation failed", "check_traceback"),
    ("✗ the SDK paths could not be read", "sdk_traceback"),
)


def with_tracebacks(lines: Sequence[str], probe: Mapping[str, Any]) -> tuple[str, ...]:
    """``lines`` with the project's traceback indented under each ✗ line it explains. Pure."""
    out: list[str] = []
    for line in lines:
        out.append(line)
        for prefix, key in _TRACEBACKS:
            text = probe.get(key)
            if line.startswith(prefix) and isinstance(text, str) and text.strip():
                out += [TRACEBACK_INDENT + t for t in text.rstrip("\n").splitlines()]
    return tuple(out)


def _exit_words(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with status {returncode}"


def crash_report(returncode: int, stderr: str, probe_path: str) -> tuple[str, list[str]]:
    """What a probe that died without a report shows: one line naming the phase it died in
    (``import tinyaxpy``, ``run tinyaxpy:selftest``) and how, then its stderr less the probe's
    own frames and phase marks (Python's fault handler prints the project's stack there). Pure."""
    phase = "start"
    shown: list[str] = []
    for line in stderr.splitlines():
        if line.startswith(PHASE_MARK):
            phase = line[len(PHASE_MARK) :].strip()
        elif probe_path not in line:
            shown.append(line)
    while shown and not shown[-1].strip():
        shown.pop()
    while shown and not shown[0].strip():
        shown.pop(0)
    return f"✗ the probe {_exit_words(returncode)} during `{phase}`, before it could report", shown
