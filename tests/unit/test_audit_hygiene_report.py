"""Check ``hygiene``, the renderers, the record, and how a wheel finds its row."""

from __future__ import annotations

import base64
import hashlib
import json
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from helpers.audit import CPU, abi, contents, cuda, elf, fatbin, lib

from release.audit.checks import hygiene
from release.audit.model import AuditResult, Contents, Expectation, Finding, fail, ok
from release.audit.reading.archive import open_wheel
from release.audit.reading.inspector import inspect_libraries
from release.audit.report.render import render_gpu_markdown, render_json, render_text
from release.audit.run import expectation_for_wheel
from release.core.errors import InputError
from release.policy.load import load_policy
from release.policy.matrix import expand

NAME = "pkg-1.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl"
FIXTURE_POLICY = Path(__file__).resolve().parents[1] / "fixtures" / "policy.toml"


def failing(findings: list[Finding]) -> list[str]:
    return [f.message for f in findings if not f.ok]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build(
    tmp_path: Path, files: dict[str, bytes], *, record: dict[str, str] | None = None, omit: str = ""
) -> Path:
    """A wheel whose RECORD is right, except where ``record`` overrides a line."""
    lines = []
    for name, data in files.items():
        if name == omit:
            continue
        lines.append((record or {}).get(name, f"{name},sha256={_b64(data)},{len(data)}"))
    lines.append("pkg-1.0+cu130.dist-info/RECORD,,")
    path = tmp_path / NAME
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr("pkg-1.0+cu130.dist-info/RECORD", "\n".join(lines) + "\n")
    return path


@contextmanager
def opened(path: Path) -> Iterator[Contents]:
    with open_wheel(path) as w:
        yield Contents(w, inspect_libraries(w), abi())


FILES = {"pkg/__init__.py": b"", "pkg-1.0+cu130.dist-info/METADATA": b"Name: pkg\nVersion: 1.0+cu130\n"}


def test_record_matches(tmp_path: Path) -> None:
    with opened(build(tmp_path, FILES)) as c:
        assert failing(hygiene.record_findings(c)) == []


def test_record_hash_mismatch(tmp_path: Path) -> None:
    bad = {"pkg/__init__.py": f"pkg/__init__.py,sha256={_b64(b'other')},0"}
    with opened(build(tmp_path, FILES, record=bad)) as c:
        msgs = failing(hygiene.record_findings(c))
    assert len(msgs) == 1 and msgs[0].startswith("pkg/__init__.py: RECORD says sha256=")
    assert "pip refuses to install" in msgs[0]


def test_record_weak_hash_missing_file_and_extra_line(tmp_path: Path) -> None:
    md5 = {"pkg/__init__.py": "pkg/__init__.py,md5=1B2M2Y8AsgTpgAmY7PhCfg,0"}
    with opened(build(tmp_path, FILES, record=md5)) as c:
        assert failing(hygiene.record_findings(c)) == [
            "RECORD hashes pkg/__init__.py with 'md5'; wheels need sha256 or stronger"
        ]
    with opened(build(tmp_path, FILES, omit="pkg/__init__.py")) as c:
        assert failing(hygiene.record_findings(c)) == ["pkg/__init__.py is in the wheel but not in RECORD"]
    ghost = dict(FILES)
    path = build(
        tmp_path, ghost, record={"pkg/__init__.py": f"pkg/__init__.py,sha256={_b64(b'')},0\npkg/ghost.py,,"}
    )
    with opened(path) as c:
        assert failing(hygiene.record_findings(c)) == [
            "RECORD lists pkg/ghost.py but the wheel has no such file"
        ]


def test_record_missing(tmp_path: Path) -> None:
    path = tmp_path / NAME
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("pkg-1.0+cu130.dist-info/METADATA", "Name: pkg\n")
    with opened(path) as c:
        assert failing(hygiene.record_findings(c)) == [
            "pkg-1.0+cu130.dist-info/RECORD is missing: installers cannot verify or uninstall the wheel"
        ]


def test_grafted_runtime_and_driver(tmp_path: Path) -> None:
    files = dict(FILES)
    files["pkg.libs/libcudart-1a2b3c4d.so.13.0.96"] = b"x"
    files["pkg/lib/libcuda.so.1"] = b"x"
    files["pkg/lib/libnvidia-ml.so.1"] = b"x"
    files["pkg.libs/libcublas-0f0f0f0f.so.13"] = b"x"
    files["pkg/lib/libcudart_wrapper.so"] = b"x"  # not the runtime
    with opened(build(tmp_path, files)) as c:
        msgs = failing(hygiene.grafted_findings(c))
    assert len(msgs) == 4
    assert msgs[0].startswith(
        "pkg.libs/libcudart-1a2b3c4d.so.13.0.96 is the CUDA runtime of CUDA 13 (libcudart-1a2b3c4d.so.13.0.96, "
        "from nvidia-cuda-runtime), known by its file name: a copy of the CUDA runtime grafted into the wheel"
    )
    assert "a copy of the CUDA driver" in msgs[1] and "a copy of the CUDA driver" in msgs[2]
    assert msgs[3].startswith(
        "pkg.libs/libcublas-0f0f0f0f.so.13 is cuBLAS of CUDA 13 (libcublas-0f0f0f0f.so.13, from nvidia-cublas), "
        "known by its file name: a CUDA library grafted into the wheel by a repair step"
    )


def test_one_owner_per_component() -> None:
    one_folder = contents(
        lib("pkg/lib/libk.so", fatbin("sm_80"), sha=b"1", info=elf(soname="libk.so.1")),
        lib("pkg/lib/libk.so.1", fatbin("sm_80"), sha=b"2", info=elf(soname="libk.so.1")),
    )
    assert failing(hygiene.owner_findings(one_folder))[0].startswith(
        "libk.so.1 is shipped as 2 different builds in one folder"
    )
    separate = contents(
        lib("pkg/lib/libk.so", fatbin("sm_80"), sha=b"1"), lib("pkg/lib2/libk.so", fatbin("sm_80"), sha=b"2")
    )
    assert failing(hygiene.owner_findings(separate)) == [], "builds chosen at run time"
    same_bytes = contents(lib("pkg/bin/tool", sha=b"1"), lib("pkg/bin/tool-1.0", sha=b"1"))
    assert failing(hygiene.owner_findings(same_bytes)) == [
        "the same ELF file is shipped 2 times under different names: pkg/bin/tool, pkg/bin/tool-1.0"
    ]
    both = contents(lib("pkg/lib/libk.so", sha=b"1"), lib("pkg/lib2/libk.so", sha=b"1"))
    assert len(failing(hygiene.owner_findings(both))) == 1, "reported once"
    extensions = contents(
        lib("a/_core.cpython-312-x86_64-linux-gnu.so"), lib("b/_core.cpython-312-x86_64-linux-gnu.so")
    )
    assert not failing(hygiene.owner_findings(extensions)), (
        "extension modules are loaded by path, not by name"
    )


def test_platform_tag_honest_and_not() -> None:
    honest = hygiene.platform_findings(contents(lib(), abi=abi()), cuda())
    assert [f.ok for f in honest] == [True]
    assert "consistent with manylinux_2_17_x86_64" in honest[0].message
    files = {
        "pkg/lib/libk.so": {
            "sym_tag": "manylinux_2_34_x86_64",
            "beyond_claimed": ["GLIBC_2.32", "GLIBC_2.34"],
        }
    }
    report = abi(honest=False, overall="manylinux_2_34_x86_64", limited_by=("symbol versions",), files=files)
    msgs = failing(hygiene.platform_findings(contents(lib(), abi=report), cuda()))
    assert msgs == [
        "platform tag manylinux_2_28_x86_64 claims more than the wheel allows: auditwheel says "
        "manylinux_2_34_x86_64 at best (libk.so needs GLIBC_2.32, GLIBC_2.34); build on an older manylinux "
        "image or tag it manylinux_2_34_x86_64"
    ]
    ext = abi(
        honest=False,
        overall="linux_x86_64",
        limited_by=("external libraries",),
        libs_to_eliminate=("libfoo.so.1",),
    )
    assert "it links libfoo.so.1" in failing(hygiene.platform_findings(contents(lib(), abi=ext), cuda()))[0]


def test_platform_tag_fails_closed() -> None:
    assert failing(hygiene.platform_findings(contents(lib(), abi=None), cuda())) == [
        "auditwheel's analysis did not run; the platform tag is unverified"
    ]
    err = failing(hygiene.platform_findings(contents(lib(), abi=abi(error="ELFError: bad")), cuda()))
    assert err == ["auditwheel could not analyse the wheel: ELFError: bad"]
    assert (
        "no platform ELF file" in failing(hygiene.platform_findings(contents(abi=abi(pure=True)), cuda()))[0]
    )
    assert (
        "could be read"
        in failing(hygiene.platform_findings(contents(lib(error="truncated"), abi=abi()), cuda()))[0]
    )
    pure = hygiene.platform_findings(contents(platform_tags=("any",)), CPU)
    assert [f.ok for f in pure] == [True]
    assert failing(hygiene.platform_findings(contents(lib(), platform_tags=("any",)), CPU)) == [
        "the wheel is tagged 'any' but ships ELF files; it must carry a platform tag"
    ]


def test_row_tags_must_match() -> None:
    exp = Expectation(
        "cu130", "13.0", (), (), platform_tag="manylinux_2_34_x86_64", python_tag="cp313", row_id="r"
    )
    msgs = failing(hygiene.platform_findings(contents(lib(), abi=abi()), exp))
    assert msgs == [
        "the wheel is tagged manylinux_2_28_x86_64 but row r is manylinux_2_34_x86_64",
        "the wheel is for cp312 but row r is cp313",
    ]


def test_size_limit() -> None:
    small = Expectation("cu130", "13.0", (), (), max_wheel_mib=1)
    assert [f.ok for f in hygiene.size_findings(contents(size=1000), small)] == [True]
    assert failing(hygiene.size_findings(contents(size=3 << 20), small)) == [
        "the wheel is 3.0 MiB, over the index's limit of 1 MiB"
    ]
    assert hygiene.size_findings(contents(size=3 << 20), cuda()) == []


# --------------------------------------------------------------------------- rows


def test_expectation_for_wheel() -> None:
    policy = load_policy(FIXTURE_POLICY)
    rows = expand(policy)
    exp = expectation_for_wheel(f"dir/{NAME}", policy, rows)
    assert (exp.row_id, exp.variant, [str(a) for a in exp.gpu_archs]) == (
        "cu130-py312-x86_64",
        "cu130",
        ["8.0", "9.0+PTX"],
    )
    cpu = expectation_for_wheel("pkg-1.0-cp312-cp312-manylinux_2_28_x86_64.whl", policy, rows)
    assert cpu.row_id == "cpu-py312-x86_64" and not cpu.is_cuda
    with pytest.raises(InputError, match=r"no row of .* has variant 'cu126'"):
        expectation_for_wheel("pkg-1.0+cu126-cp312-cp312-manylinux_2_28_x86_64.whl", policy, rows)
    with pytest.raises(InputError, match="rows of variant cu130: cu130-py312-x86_64"):
        expectation_for_wheel("pkg-1.0+cu130-cp312-cp312-linux_x86_64.whl", policy, rows)
    with pytest.raises(InputError, match="not a wheel file name"):
        expectation_for_wheel("pkg.zip", policy, rows)


def test_expectation_for_variant() -> None:
    policy = load_policy(FIXTURE_POLICY)
    exp = Expectation.for_variant("cu130", (), policy)
    assert exp.is_cuda and exp.cuda_packages[0].name == "nvidia-cuda-runtime" and exp.row_id is None
    with pytest.raises(ValueError, match="defines no train with variant 'cu126'"):
        Expectation.for_variant("cu126", (), policy)
    with pytest.raises(ValueError, match="not 'cpu' or a CUDA variant"):
        Expectation.for_variant("gpu", (), policy)
    assert not Expectation.for_variant("cpu", (), None).is_cuda


# --------------------------------------------------------------------------- rendering and record


def result(tmp_path: Path, findings: tuple[Finding, ...]) -> AuditResult:
    wheel = tmp_path / NAME
    wheel.write_bytes(b"wheel bytes")
    return AuditResult(
        wheel=NAME,
        wheel_path=wheel,
        sha256=hashlib.sha256(b"wheel bytes").hexdigest(),
        expectation=Expectation(
            "cu130", "13.0", (), (), row_id="cu130-py312-x86_64", policy_sha256="ab" * 32
        ),
        findings=findings,
        gpu_table=(),
        arch_list_found=None,
    )


def test_text_json_markdown(tmp_path: Path) -> None:
    r = result(
        tmp_path, (ok("libraries", "fine"), fail("loader", "libk.so needs x\nsecond line", "pkg/lib/libk.so"))
    )
    text = render_text(r)
    assert "  ✓ fine" in text and "  ✗ libk.so needs x" in text and "      second line" in text
    assert text.endswith("FAILED: 1 failing finding (loader)")
    doc = json.loads(render_json([r]))
    assert doc["version"] == 1 and doc["results"][0]["failed_checks"] == ["loader"]
    assert list(doc) == sorted(doc)
    assert "runs on no GPU" in render_gpu_markdown(r)
