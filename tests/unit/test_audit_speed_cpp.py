"""The C++ consumer check's compile steps started early, while the libraries are still being unpacked
(release.audit.cpp.early.EarlyCpp): the finding is the one the check gives on its own, for an SDK that
links and for one that must fail; an include directory with a member still being read waits."""

from __future__ import annotations

import stat
import subprocess
import zipfile
from pathlib import Path

import pytest

from release.audit.claim import claim_expectation
from release.audit.cpp import early as cpp_early
from release.audit.model import Member
from release.audit.reading.archive import open_wheel

NAME = "pkg-1.0-py3-none-manylinux_2_28_x86_64.whl"
C_API = b'#pragma once\n#ifdef __cplusplus\nextern "C" {\n#endif\n%s\n#ifdef __cplusplus\n}\n#endif\n'


def _wheel(tmp_path: Path, header: bytes) -> Path:
    src = tmp_path / "foo.c"
    src.write_text("int foo(void) { return 1; }\n", encoding="utf-8")
    lib = tmp_path / "libfoo.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", lib, src], check=True)
    path = tmp_path / NAME
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in (
            ("pkg/lib/libfoo.so", lib.read_bytes()),
            ("pkg/include/foo.h", header),
            ("pkg-1.0.dist-info/METADATA", b"Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n"),
            ("pkg-1.0.dist-info/WHEEL", b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: py3-none-any\n"),
        ):
            info = zipfile.ZipInfo(name, (2024, 1, 1, 0, 0, 0))
            info.external_attr = (stat.S_IFREG | 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    return path


@pytest.mark.parametrize(
    ("header", "passed", "words"),
    [
        (C_API % b"int foo(void);", True, "referencing 1 declared function"),
        (C_API % b"int foo(void);\nint missing(void);", False, "does not link"),
        (b'#include "/etc/hostname"\n', False, "an absolute path"),
    ],
)
def test_early_compile_gives_the_same_finding(
    tmp_path: Path, header: bytes, passed: bool, words: str
) -> None:
    expectation = claim_expectation(variant=None, gpu_archs=None, policy=None, runs_on="8.0")
    early = cpp_early.EarlyCpp(True)
    with early, open_wheel(_wheel(tmp_path, header), on_others_done=early.start) as wheel:
        assert list(early.futures) == [("pkg/include", ("foo.h",))]
        first, _ = cpp_early.cached_check(wheel, expectation, early)
        alone, _ = cpp_early.cached_check(wheel, expectation, cpp_early.EarlyCpp(False))
        scratch = next(iter(early.futures.values())).result().scratch
    assert not scratch.exists(), "the early scratch directory is removed"
    assert [(f.ok, f.message, f.details) for f in first] == [(f.ok, f.message, f.details) for f in alone]
    assert len(first) == 1 and first[0].ok is passed and words in first[0].message


def test_waits_while_a_member_of_the_include_directory_is_read(tmp_path: Path) -> None:
    header = Member("pkg/include/foo.h", 3, b"\0" * 32, None, "file", data=b"x;\n")
    early = cpp_early.EarlyCpp(True)
    with early:
        early.start([header], frozenset({"pkg/include/big.so", "pkg/lib/libfoo.so"}))
        early.start([header], frozenset({"pkg/other/libfoo.so"}))  # no lib/ beside it: no SDK
    assert not early.futures
    with cpp_early.EarlyCpp(False) as unwanted:
        unwanted.start([header], frozenset({"pkg/lib/libfoo.so"}))
    assert not unwanted.futures
