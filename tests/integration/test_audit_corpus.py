"""The audit on a corpus of real third-party CUDA wheels, run as a user runs it: from an empty folder.

Eight wheels from PyPI, pinned by name and sha256 in tests/helpers/real_wheels.py (fetched into a cache,
never copied into the repository; a wheel that cannot be fetched fails its test), chosen for what
they carry:

==========================  ================================================================
torchvision 0.29.1           a Python extension, a grafted libcudart and a bundled nvJPEG
nvidia_cufile 1.15.1.6       LZ4-compressed PTX of ISA 7.1 (CUDA 11.1), uncompressed SASS
nvidia_curand 10.4.0.35      uncompressed SASS next to zstd PTX, compute_121
nvidia_nvshmem_cu13 3.4.5    relocatable device code, device-linked
nvidia_nccl_cu13 2.30.7      relocatable device code, sm_100f units that run on Blackwell only
nvidia_cusparse 12.6.3.3     34 fatbinaries embedded as data in .rodata
nvidia_cufft 12.0.0.61       23,983 fatbinaries embedded as data in .ldata
nvidia_cudnn_cu13 9.24.0.43  sm_90a/sm_100f/sm_120f/sm_107, PTX ISA 9.3 (newer than CUDA 13.2)
==========================  ================================================================

For each: every library's inventory (the audit's JSON) equals cuobjdump's (``--list-elf``,
``--list-ptx`` and the header dump, which keeps the a/f suffixes, the PTX ISA and compression);
the claim the audit reads back passes when fed back, from a folder with no rows.toml; a claim
that leaves out one architecture fails; and a full audit gives a verdict (0 or 1). Costs on this
machine (2 cores): docs/audit.md. cuDNN's libraries (800 MB) are cross-checked only with
``WHEELWRIGHT_BIG_BINARIES=1``.
"""

from __future__ import annotations

import os
import re
import zipfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from helpers.proc import audit_json
from helpers.real_wheels import CORPUS, real_wheel

from release.binary.cuobjdump import ensure_cuobjdump, header_dump, list_device_code
from release.core.machine import default_cache_dir

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.network]

ROOT = Path(__file__).resolve().parents[2]
BIG = os.environ.get("WHEELWRIGHT_BIG_BINARIES") == "1"
EMBEDDED = {"nvidia_cusparse", "nvidia_cufft"}  # their passing claim allows device code embedded as data


def audit(wheel: Path, *args: str, cwd: Path) -> tuple[int, dict[str, Any]]:
    """``python -m release audit WHEEL ARGS --json --no-record`` in ``cwd`` (no rows.toml there)."""
    return audit_json(wheel, *args, "--no-record", cwd=cwd)


@pytest.fixture(scope="module")
def empty(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("empty")
    assert not (folder / "rows.toml").exists()
    return folder


@pytest.mark.parametrize("key", CORPUS)
def test_read_back_claim_passes_and_a_narrower_one_fails(key: str, empty: Path) -> None:
    wheel = real_wheel(key)
    allow = ["--allow", "embedded-device-code"] if key in EMBEDDED else []
    code, full = audit(wheel, "--runs-on", "8.0", cwd=empty)  # a full audit: a verdict, 0 or 1
    assert full["standalone"] and full["train"] and full["arch_list_found"], full["train_source"]
    claim = full["arch_list_found"]
    code, fed = audit(wheel, "--gpu-archs", claim, *allow, "--checks", "device_code,gpus", cwd=empty)
    assert code == 0, [f["message"] for f in fed["findings"] if not f["ok"]]
    assert fed["partial"] and fed["checks_run"] == ["device_code", "gpus"]
    code, _ = audit(wheel, "--gpu-archs", claim, cwd=empty)  # the whole audit on that claim: a verdict
    narrower = _drop_one(claim)
    code, narrow = audit(wheel, "--gpu-archs", narrower, *allow, "--checks", "device_code,gpus", cwd=empty)
    assert code == 1 and "device_code" in narrow["failed_checks"], narrower


def _drop_one(claim: str) -> str:
    """The claim without its first entry (of the first library's list)."""
    words = claim.split()
    name, _, archs = words[0].rpartition("=")
    entries = archs.split(";")
    kept = ";".join(entries[1:]) or "sm_50"  # a claim of nothing it carries
    words[0] = f"{name}={kept}" if name else kept
    return " ".join(words)


def _members(wheel: Path, wanted: set[str], into: Path) -> dict[str, Path]:
    out = {}
    with zipfile.ZipFile(wheel) as z:
        for name in wanted:
            target = into / name.replace("/", "__")
            with z.open(name) as src, target.open("wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
            out[name] = target
    return out


def _ours(
    item: dict[str, Any],
) -> tuple[Counter[tuple[str, str]], Counter[tuple[str, str, str | None, bool]]]:
    """The inventory as cuobjdump would list it: the executable entries, else the relocatable ones."""
    entries = [e for e in item["entries"] if not e["relocatable"]] or item["entries"]
    listing: Counter[tuple[str, str]] = Counter()
    headers: Counter[tuple[str, str, str | None, bool]] = Counter()
    for e in entries:
        variant = e["variant"]
        word = {"sass": "elf", "ptx": "ptx", "ltoir": "nvvm"}[e["kind"]]
        headers[(word, f"sm_{e['arch']}{variant}", e["ptx_isa"], e["compressed"] is not None)] += e["count"]
        if e["kind"] == "sass":
            listing[("sass", f"sm_{e['arch']}{'' if variant == 'f' else variant}")] += e["count"]
        elif e["kind"] == "ptx":
            listing[("ptx", f"compute_{e['arch']}{variant}")] += e["count"]
    return listing, headers


@pytest.mark.parametrize("key", CORPUS)
def test_inventory_equals_cuobjdump(key: str, empty: Path, tmp_path: Path) -> None:
    if key == "nvidia_cudnn_cu13" and not BIG:
        pytest.skip("cuDNN's 800 MB of libraries: set WHEELWRIGHT_BIG_BINARIES=1")
    wheel = real_wheel(key)
    _code, result = audit(wheel, "--runs-on", "8.0", "--checks", "libraries", cwd=empty)
    inventory = [item for item in result["inventory"] if item["entries"]]
    assert inventory, "the sweep must check something"
    tool = ensure_cuobjdump(default_cache_dir(os.environ))
    files = _members(wheel, {item["library"] for item in inventory}, tmp_path)
    problems = []
    for item in inventory:
        path = files[item["library"]]
        listing, headers = _ours(item)
        theirs: Counter[tuple[str, str]] = Counter(list_device_code(path, cuobjdump=tool))
        dumped = Counter(
            (kind, arch, f"{v[0]}.{v[1]}" if v else None, compressed)
            for kind, arch, v, compressed in header_dump(path, cuobjdump=tool)
        )
        if listing != theirs:
            problems.append(
                f"{item['library']}: listing {sorted((listing - theirs).items())} / {sorted((theirs - listing).items())}"
            )
        if headers != dumped:
            problems.append(
                f"{item['library']}: headers {sorted((headers - dumped).items())[:5]} / {sorted((dumped - headers).items())[:5]}"
            )
        path.unlink()
    assert not problems, "\n".join(problems)


def test_what_the_corpus_shows(empty: Path) -> None:
    """Each wheel's reason to be in the corpus, as the audit reports it (the table in the docstring)."""
    found: dict[str, dict[str, Any]] = {}
    for key in ("torchvision", "nvidia_cufile", "nvidia_nvshmem_cu13", "nvidia_nccl_cu13", "nvidia_cusparse"):
        _code, found[key] = audit(real_wheel(key), "--runs-on", "9.0", cwd=empty)
    messages = {k: " ".join(f["message"] for f in r["findings"] if not f["ok"]) for k, r in found.items()}
    assert "libcudart.faf08d9a.so.13 is the CUDA runtime" in messages["torchvision"]
    assert re.search(
        r"libnvjpeg\.36e11081\.so\.13 is nvJPEG .* bundled in the wheel", messages["torchvision"]
    )
    cufile = {e["target"]: e for item in found["nvidia_cufile"]["inventory"] for e in item["entries"]}
    assert cufile["compute_86"]["ptx_isa"] == "7.1" and cufile["compute_86"]["compressed"] == "lz4"
    assert cufile["compute_86"]["emitted_by"] == "CUDA 11.1"
    nvshmem = found["nvidia_nvshmem_cu13"]["inventory"][0]
    assert nvshmem["loads"] and nvshmem["units"]["relocatable"] > 0
    assert "does not run on H100 / H200 (9.0)" not in messages["nvidia_nvshmem_cu13"]
    nccl = next(r for r in found["nvidia_nccl_cu13"]["gpu_table"] if r["cc"] == "9.0")
    assert nccl["wheel"] == "partial"  # its sm_100f units hold Blackwell-only kernels
    assert "embeds device code as data: 34 fatbins in .rodata" in messages["nvidia_cusparse"]
