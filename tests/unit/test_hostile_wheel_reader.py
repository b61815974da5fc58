"""release.audit.reading.archive on hostile archives: refusals, limits counted as bytes inflate, small issues, linear time."""

from __future__ import annotations

import shutil
import stat
import time
import zipfile
from pathlib import Path

import pytest

from release.audit.reading.archive import open_wheel
from release.audit.reading.limits import LimitExceeded, Limits
from release.core.errors import InputError, StepFailed

NAME = "pkg-1.0-cp312-cp312-manylinux_2_28_x86_64.whl"


def _info(name: str, mode: int = stat.S_IFREG | 0o644, system: int = 3) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, (2024, 1, 1, 0, 0, 0))
    info.create_system = system
    info.external_attr = mode << 16 if system == 3 else mode
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def make(tmp_path: Path, entries: list[tuple[zipfile.ZipInfo | str, bytes]]) -> Path:
    path = tmp_path / NAME
    with zipfile.ZipFile(path, "w") as zf:
        for info, data in entries:
            zf.writestr(_info(info) if isinstance(info, str) else info, data)
    return path


ELF = b"\x7fELF" + b"\0" * 60


@pytest.mark.parametrize(
    ("info", "data", "expected"),
    [
        (_info("pkg/lib/libcudart.so.13", stat.S_IFDIR | 0o755), ELF, "mode says directory"),
        (_info("pkg/lib/libcudart.so.13", 0x10, system=0), ELF, "mode says directory"),
        (_info("pkg/sub/", stat.S_IFREG | 0o644), b"", "ends in '/' but its mode is -rw-r--r--"),
        (_info("pkg/sub/", stat.S_IFDIR | 0o755), b"hidden", "carries 6 bytes"),
    ],
)
def test_mode_and_name_must_agree(tmp_path: Path, info: zipfile.ZipInfo, data: bytes, expected: str) -> None:
    wheel = make(tmp_path, [("pkg/__init__.py", b""), (info, data)])
    with (
        pytest.raises(InputError, match=f"^{NAME}: member '{info.filename}': .*{expected}"),
        open_wheel(wheel),
    ):
        pass


def test_directories_by_name_pass(tmp_path: Path) -> None:
    wheel = make(
        tmp_path, [(_info("pkg/", stat.S_IFDIR | 0o755), b""), ("pkg/x.py", b"x"), (_info("pkg/d/", 0), b"")]
    )
    with open_wheel(wheel) as w:
        assert [m.kind for m in w.members] == ["directory", "file", "directory"]
        assert not w.issues


def test_metadata_refused_as_it_inflates(tmp_path: Path) -> None:
    """The per-member cap counts bytes as they come, whatever the header says."""
    wheel = make(tmp_path, [("pkg/x.py", b""), ("pkg-1.0.dist-info/METADATA", b"Name: pkg\n" + b" " * 5000)])
    with (
        pytest.raises(LimitExceeded, match=r"pkg-1.0.dist-info/METADATA inflates past 4\.9 KiB, its limit"),
        open_wheel(wheel, limits=Limits(metadata_bytes=5000)),
    ):
        pass
    with open_wheel(wheel, limits=Limits(metadata_bytes=5010)) as w:
        assert w.metadata is not None


def test_one_refusal_stops_every_thread(tmp_path: Path) -> None:
    """Many members over their cap on several threads: the first refusal is the one raised."""
    entries: list[tuple[zipfile.ZipInfo | str, bytes]] = [
        (f"x{i}-1.0.dist-info/WHEEL", b"w" * 20_000) for i in range(40)
    ]
    wheel = make(tmp_path, [*entries, *((f"pkg/lib{i}.so", ELF * 1000) for i in range(40))])
    with (
        pytest.raises(LimitExceeded, match="inflates past"),
        open_wheel(wheel, workdir=tmp_path, threads=4, limits=Limits(wheel_file_bytes=100)),
    ):
        pass
    assert not list(tmp_path.glob("wheelwright-audit-*"))


def test_disk_room_is_counted_as_files_are_written(tmp_path: Path) -> None:
    wheel = make(tmp_path, [("pkg/lib/libbig.so", ELF + bytes(32 << 20))])
    free = shutil.disk_usage(tmp_path).free
    with (
        pytest.raises(StepFailed, match="set TMPDIR to a larger disk"),
        open_wheel(wheel, workdir=tmp_path, limits=Limits(disk_reserve_bytes=free - (4 << 20))),
    ):
        pass
    assert not list(tmp_path.glob("wheelwright-audit-*")), "the tree is removed on refusal"


def test_record_refused_before_the_pass(tmp_path: Path) -> None:
    wheel = make(tmp_path, [("pkg/x.py", b""), ("pkg-1.0.dist-info/RECORD", b"pkg/x\r.py,,\n")])
    with pytest.raises(InputError, match=r"RECORD line 1 holds a line break '\\r'"), open_wheel(wheel):
        pass


def test_many_issues_are_counted_not_listed(tmp_path: Path) -> None:
    entries: list[tuple[zipfile.ZipInfo | str, bytes]] = [(f"../escape{i}.py", b"") for i in range(25)]
    entries += [(_info(f"pkg/link{i}", stat.S_IFLNK | 0o777), b"/etc/passwd") for i in range(3)]
    with open_wheel(make(tmp_path, entries)) as w:
        kinds = [i.kind for i in w.issues]
        assert kinds.count("unsafe-path") == 11 and kinds.count("symlink") == 3
        assert (
            w.issues[10].message == "15 more unsafe-path entries, named '../escape10.py', '../escape11.py', "
            "'../escape12.py', '../escape13.py', '../escape14.py' and 10 more"
        )


def test_linear_in_the_number_of_members(tmp_path: Path) -> None:
    """5,000 members named *.dist-info/RECORD took 129 s when the directory was reread per member."""
    entries: list[tuple[zipfile.ZipInfo | str, bytes]] = [
        (f"x{i}.dist-info/RECORD", b"a,,\n") for i in range(5000)
    ]
    wheel = make(tmp_path, [("pkg-1.0.dist-info/RECORD", b"pkg/x.py,sha512=ab,1\n"), *entries])
    start = time.monotonic()
    with open_wheel(wheel) as w:
        assert len(w.members) == 5001
    assert time.monotonic() - start < 30
