"""release.audit.reading.identity: member types by name, RECORD as pip splits it, one name, version and tag set."""

from __future__ import annotations

import hashlib
import stat
import zipfile
from pathlib import Path

import pytest

from release.audit.reading.archive import open_wheel
from release.audit.reading.identity import (
    check_identity,
    dist_info_dirs,
    identity_problems,
    identity_split,
    member_kind,
    read_record,
)
from release.audit.reading.limits import LIMITS, LimitExceeded, Limits
from release.core.errors import InputError

NAME = "pkg-1.0-cp312-cp312-manylinux_2_28_x86_64.whl"
TAG = "cp312-cp312-manylinux_2_28_x86_64"
META = "Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n"
WHEEL = f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: {TAG}\n"


def info(name: str, mode: int, *, system: int = 3, size: int = 0) -> zipfile.ZipInfo:
    i = zipfile.ZipInfo(name)
    i.create_system = system
    i.external_attr = mode << 16 if system == 3 else mode
    i.file_size = size
    return i


@pytest.mark.parametrize(
    ("name", "mode", "system", "size", "kind", "disagree"),
    [
        ("pkg/x.py", stat.S_IFREG | 0o644, 3, 5, "file", None),
        ("pkg/x.py", 0, 0, 5, "file", None),  # MS-DOS, no attributes
        ("pkg/", stat.S_IFDIR | 0o755, 3, 0, "directory", None),
        ("pkg/", 0, 3, 0, "directory", None),  # no mode bits: by name
        ("pkg/lib/libcudart.so.13", stat.S_IFDIR | 0o755, 3, 9, "file", "mode says directory"),
        ("pkg/lib/libcudart.so.13", 0x10, 0, 9, "file", "mode says directory"),  # MS-DOS directory attribute
        ("pkg/sub/", stat.S_IFREG | 0o644, 3, 0, "directory", "its mode is -rw-r--r--"),
        ("pkg/sub/", stat.S_IFDIR | 0o755, 3, 100, "directory", "carries 100 bytes"),
        ("pkg/link", stat.S_IFLNK | 0o777, 3, 4, "symlink", None),
        ("pkg/fifo", stat.S_IFIFO | 0o644, 3, 0, "special", None),
    ],
)
def test_member_kind_by_name(
    name: str, mode: int, system: int, size: int, kind: str, disagree: str | None
) -> None:
    got, why = member_kind(info(name, mode, system=system, size=size))
    assert got == kind
    assert (why is None) == (disagree is None)
    if disagree is not None:
        assert why is not None and disagree in why


def test_one_identity_has_no_problems() -> None:
    assert identity_problems(NAME, ["pkg-1.0.dist-info"], META, WHEEL) == []
    # compressed tag sets, a local version label and a build tag, spelled as builders spell them
    two = "manylinux_2_17_x86_64.manylinux2014_x86_64"
    wheel = "Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: py3-none-manylinux_2_17_x86_64\nTag: py3-none-manylinux2014_x86_64\nBuild: 5\n"
    meta = "Metadata-Version: 2.1\nName: My.Pkg\nVersion: 1.0+cu130\n"
    assert (
        identity_problems(
            f"my_pkg-1.0+cu130-5-py3-none-{two}.whl", ["my_pkg-1.0+cu130.dist-info"], meta, wheel
        )
        == []
    )


@pytest.mark.parametrize(
    ("dist_infos", "metadata", "wheel", "expected"),
    [
        ([], META, WHEEL, "has no .dist-info directory"),
        (["pkg-1.0.dist-info", "other-1.0.dist-info"], META, WHEEL, "has 2 .dist-info directories"),
        (["other-1.0.dist-info"], META, WHEEL, "belongs to another distribution"),
        (["pkg-2.0.dist-info"], META, WHEEL, "says version 2.0 but the file name says 1.0"),
        (["pkg-1.0.dist-info"], META.replace("Name: pkg", "Name: other"), WHEEL, "says Name: other"),
        (["pkg-1.0.dist-info"], META.replace("Version: 1.0", "Version: 2.0"), WHEEL, "says Version: 2.0"),
        (["pkg-1.0.dist-info"], META + "Name: again\n", WHEEL, "2 Name fields"),
        (["pkg-1.0.dist-info"], "Metadata-Version: 2.1\nName: pkg\n", WHEEL, "has no Version field"),
        (
            ["pkg-1.0.dist-info"],
            META.replace("Name: pkg", "Name: -bad-"),
            WHEEL,
            "not a valid distribution name",
        ),
        (["pkg-1.0.dist-info"], None, WHEEL, "METADATA is missing"),
        (["pkg-1.0.dist-info"], META, None, "WHEEL is missing"),
        (["pkg-1.0.dist-info"], META, WHEEL.replace("1.0", "2.0", 1), "Wheel-Version: 2.0"),
        (["pkg-1.0.dist-info"], META, WHEEL.replace("cp312-cp312", "cp311-cp311"), "lists the tags"),
        (["pkg-1.0.dist-info"], META, WHEEL.replace(f"Tag: {TAG}\n", ""), "lists the tags none"),
        (["pkg-1.0.dist-info"], META, WHEEL + "Tag: nonsense\n", "not interpreter-abi-platform"),
        (["pkg-1.0.dist-info"], META, WHEEL + "Build: 3\n", "says Build: 3"),
    ],
)
def test_each_disagreement_is_named(
    dist_infos: list[str], metadata: str | None, wheel: str | None, expected: str
) -> None:
    problems = identity_problems(NAME, dist_infos, metadata, wheel)
    assert any(expected in p for p in problems), problems


def test_dist_info_dirs_lists_every_top_level_one() -> None:
    names = ["a-1.dist-info/RECORD", "b-1.dist-info/x/y", "pkg/c-1.dist-info/RECORD", "d-1.dist-info"]
    assert dist_info_dirs(names) == ["a-1.dist-info", "b-1.dist-info"]


def _wheel(tmp_path: Path, files: dict[str, bytes], name: str = NAME) -> Path:
    path = tmp_path / name
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for member, data in files.items():
            zf.writestr(member, data)
    return path


GOOD = {
    "pkg/__init__.py": b"",
    "pkg-1.0.dist-info/METADATA": META.encode(),
    "pkg-1.0.dist-info/WHEEL": WHEEL.encode(),
}


def test_check_identity_on_an_opened_wheel(tmp_path: Path) -> None:
    with open_wheel(_wheel(tmp_path, GOOD)) as w:
        check_identity(w)
    bad = GOOD | {"pkg-1.0.dist-info/METADATA": META.replace("1.0", "1.1").encode()}
    with (
        open_wheel(_wheel(tmp_path, bad)) as w,
        pytest.raises(InputError, match=rf"^{NAME}: pkg-1.0.dist-info/METADATA says Version: 1.1"),
    ):
        check_identity(w)


def _record(tmp_path: Path, text: str, limits: Limits = LIMITS) -> dict[str, tuple[str, ...]]:
    path = _wheel(tmp_path, {"pkg-1.0.dist-info/RECORD": text.encode()})
    with zipfile.ZipFile(path) as zf:
        return read_record(zf, zf.getinfo("pkg-1.0.dist-info/RECORD"), NAME, limits)


def test_record_other_algorithms(tmp_path: Path) -> None:
    digest = hashlib.sha512(b"x").hexdigest()
    text = f"pkg/x.py,sha512={digest},1\r\npkg/y.py,sha256=abc,1\npkg-1.0.dist-info/RECORD,,\n"
    assert _record(tmp_path, text) == {"pkg/x.py": ("sha512",)}


@pytest.mark.parametrize(
    ("text", "error", "expected"),
    [
        ("a" * 140_000 + ",,\n", LimitExceeded, "line 1 is 140,002 characters long"),
        ("pkg/a\rb.py,,\n", InputError, r"line 1 holds a line break '\\r'"),
        ("pkg/a\x85b.py,,\n", InputError, r"line break '\\x85'"),
        ("pkg/a\u2028b.py,,\n", InputError, r"line break '\\u2028'"),
        (
            '"' + ("y" * 1000 + "\n") * 140 + '",,\n',
            InputError,
            r"line \d+ is not valid CSV: field larger than",
        ),
    ],
)
def test_record_readers_would_disagree(
    tmp_path: Path, text: str, error: type[Exception], expected: str
) -> None:
    with pytest.raises(error, match=expected):
        _record(tmp_path, text)


def test_record_size_and_line_limits(tmp_path: Path) -> None:
    with pytest.raises(LimitExceeded, match="RECORD is larger than 1 KiB"):
        _record(tmp_path, "a,,\n" * 1000, Limits(record_bytes=1024))
    with pytest.raises(LimitExceeded, match="RECORD has 1,001 lines, over the limit of 10"):
        _record(tmp_path, "a,,\n" * 1000, Limits(record_lines=10))
    assert _record(tmp_path, "a,,\n" * 10, Limits(record_lines=10)) == {}


@pytest.mark.parametrize(
    ("dist_infos", "metadata", "wheel", "refused", "tolerated"),
    [
        # what pip installs anyway: a finding (a verdict), not bad input
        (["pkg-1.0.dist-info"], META, WHEEL.replace(TAG, "cp312-cp312-linux_x86_64"), "", "lists the tags"),
        (["pkg-1.0.dist-info"], META, WHEEL + "Build: 7\n", "", "says Build: 7"),
        (["pkg-2.0.dist-info"], META, WHEEL, "", "says version 2.0"),
        (
            ["pkg-1.0.dist-info"],
            META,
            WHEEL.replace("Root-Is-Purelib: false\n", ""),
            "",
            "no Root-Is-Purelib",
        ),
        # what pip refuses: bad input
        (["pkg-1.0.dist-info"], META.replace("Name: pkg", "Name: other"), WHEEL, "says Name: other", ""),
        (
            ["pkg-1.0.dist-info"],
            META,
            WHEEL.replace("Wheel-Version: 1.0", "Wheel-Version: 2.0"),
            "Wheel-Version",
            "",
        ),
        (["pkg-1.0.dist-info"], None, WHEEL, "METADATA is missing", ""),
        (["pkg-1.0.dist-info", "x-1.0.dist-info"], META, WHEEL, "2 .dist-info directories", ""),
    ],
)
def test_identity_split_pip_refuses_or_installs_anyway(
    dist_infos: list[str], metadata: str | None, wheel: str, refused: str, tolerated: str
) -> None:
    got_refused, got_tolerated = identity_split(NAME, dist_infos, metadata, wheel)
    assert bool(got_refused) == bool(refused) and bool(got_tolerated) == bool(tolerated)
    assert all(refused in p for p in got_refused) and all(tolerated in p for p in got_tolerated)
