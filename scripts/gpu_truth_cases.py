"""GPU truth cases (docs/gpu-smoke.md) through wheelwright's smoke function (release.smoke.run.smoke_wheel),
the one `python -m release smoke` calls, without the audit-record gate (several cases are built to
fail their audit). Prints what the audit predicted beside what the GPU did."""

import json
import os
from pathlib import Path

from release.build.python import find_python
from release.policy.load import load_policy
from release.policy.matrix import expand
from release.smoke.run import smoke_wheel

root = Path("tests/fixtures/wheels")
cases = json.loads((root / "gpu" / "gpu.json").read_text())["cases"]
results = []
for c in cases:
    if c["case"] == "d":
        continue  # needs nvidia-cuda-runtime-cu12==12.4.127, not carried
    policy = load_policy(root / c["policy"])
    (row,) = expand(policy)
    py = find_python(row.python, env=os.environ).path
    try:
        o = smoke_wheel(
            row, policy.project, root / c["wheel"], py, wheelhouse=Path(".gpu/wheelhouse").resolve()
        )
        ran, lines = o.passed and o.executed, list(o.lines)
    except Exception as exc:  # report, keep going
        ran, lines = False, [f"{type(exc).__name__}: {exc}"]
    predicted_runs = c["predicted"].startswith("runs")
    token = {"b": "NoKernelImage", "f": "UnsupportedPtx", "g": "undefined symbol"}.get(c["case"], "")
    said = "\n".join(lines)
    verdict = "MATCH" if (ran if predicted_runs else (not ran and token in said)) else "MISMATCH"
    print(
        f"[{verdict}] {c['case']}: {c['why']}\n    predicted: {c['predicted']} (9.0 cell: {c['support_9_0']})"
    )
    print("    " + "\n    ".join(lines[-4:]))
    results.append(
        {
            "case": c["case"],
            "wheel": c["wheel"],
            "predicted": c["predicted"],
            "ran": ran,
            "verdict": verdict,
            "lines": lines,
        }
    )
out = Path(os.environ.get("OUT", ".")) / "gpu_cases.json"
out.write_text(json.dumps(results, indent=1))
print(f"{sum(r['verdict'] == 'MATCH' for r in results)}/{len(results)} predictions matched")
