"""probe: split out of its former module."""

from __future__ import annotations

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
