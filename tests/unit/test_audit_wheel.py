"""release.audit.reading.archive: one streaming pass, safe extraction, every member hashed."""

from __future__ import annotations

import hashlib
import stat
import zipfile
from pathlib import Path

import pytest

from release.audit.reading.archive import KEEP_ENV, open_wheel, safe_member_name
from release.core.errors import InputError

NAME = "pkg-1.0-cp312-cp312-manylinux_2_28_x86_64.whl"


def _info(name: str, mode: int = stat.S_IFREG | 0o644) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, (2024, 1, 1, 0, 0, 0))
    info.create_system = 3
    info.external_attr = mode << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def make(tmp_path: Path, entries: list[tuple[zipfile.ZipInfo | str, bytes]], name: str = NAME) -> Path:
    path = tmp_path / name
    with (
        pytest.warns(UserWarning) if _has_duplicates(entries) else _nothing(),
        zipfile.ZipFile(path, "w") as zf,
    ):
        for info, data in entries:
            zf.writestr(_info(info) if isinstance(info, str) else info, data)
    return path


def _has_duplicates(entries: list[tuple[zipfile.ZipInfo | str, bytes]]) -> bool:
    names = [e.filename if isinstance(e, zipfile.ZipInfo) else e for e, _ in entries]
    return len(names) != len(set(names))


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *args: object) -> None:
        return None


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("../evil.py", "climbs"),
        ("pkg/../../evil.py", "climbs"),
        ("/etc/passwd", "absolute"),
        ("C:/x.py", "drive letter"),
        ("pkg\\x.py", "backslash"),
        ("pkg//x.py", "empty component"),
        ("", "empty"),
    ],
)
def test_unsafe_names(name: str, why: str) -> None:
    reason = safe_member_name(name)
    assert reason is not None and why in reason


@pytest.mark.parametrize("name", ["pkg/x.py", "pkg-1.0.dist-info/RECORD", "pkg/lib/libx.so.13", "a..b/c"])
def test_safe_names(name: str) -> None:
    assert safe_member_name(name) is None


def test_extracts_and_hashes_every_member(tmp_path: Path) -> None:
    elf = b"\x7fELF" + b"\0" * 100
    big = bytes(range(256)) * 4096  # 1 MiB: several chunks
    wheel = make(tmp_path, [("pkg/__init__.py", b"x = 1\n"), ("pkg/lib/libk.so", elf), ("pkg/data.bin", big)])
    with open_wheel(wheel, write_all=True) as w:
        root = w.root
        assert root.is_dir()
        by_name = {m.name: m for m in w.members}
        assert by_name["pkg/lib/libk.so"].is_elf and not by_name["pkg/__init__.py"].is_elf
        assert by_name["pkg/data.bin"].sha256 == hashlib.sha256(big).digest()
        assert by_name["pkg/data.bin"].size == len(big)
        assert (root / "pkg" / "data.bin").read_bytes() == big
        assert w.sha256 == hashlib.sha256(wheel.read_bytes()).hexdigest()
        assert (w.name, w.version, w.local) == ("pkg", "1.0", None)
        assert w.platform_tags == ("manylinux_2_28_x86_64",) and w.python_tags == ("cp312",)
        assert not w.issues
    assert not root.exists(), "the extracted tree is removed on exit"


def test_local_label(tmp_path: Path) -> None:
    wheel = make(tmp_path, [("pkg/x.py", b"")], name="pkg-1.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl")
    with open_wheel(wheel) as w:
        assert w.local == "cu130"


def test_zip_slip_and_absolute_never_written(tmp_path: Path) -> None:
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    wheel = make(sandbox, [("pkg/ok.py", b""), ("../../escaped.py", b"bad"), ("/tmp/abs_escaped.py", b"bad")])
    with open_wheel(wheel, workdir=sandbox) as w:
        kinds = sorted(i.kind for i in w.issues)
        assert kinds == ["unsafe-path", "unsafe-path"]
        assert all(m.path is None for m in w.members if m.name != "pkg/ok.py")
    assert not (tmp_path / "escaped.py").exists() and not Path("/tmp/abs_escaped.py").exists()


def test_symlink_is_not_created(tmp_path: Path) -> None:
    link = _info("pkg/lib/libcudart.so.13", stat.S_IFLNK | 0o777)
    wheel = make(tmp_path, [("pkg/x.py", b""), (link, b"/usr/local/cuda/lib64/libcudart.so.13")])
    with open_wheel(wheel) as w:
        assert [i.kind for i in w.issues] == ["symlink"]
        assert not (w.root / "pkg/lib/libcudart.so.13").exists()
        assert not (w.root / "pkg/lib/libcudart.so.13").is_symlink()


def test_special_file_refused(tmp_path: Path) -> None:
    fifo = _info("pkg/fifo", stat.S_IFIFO | 0o644)
    wheel = make(tmp_path, [(fifo, b"")])
    with open_wheel(wheel) as w:
        assert [i.kind for i in w.issues] == ["special-file"]


def test_duplicate_names(tmp_path: Path) -> None:
    wheel = make(tmp_path, [("pkg/x.py", b"first"), ("pkg/x.py", b"second")])
    with open_wheel(wheel, write_all=True) as w:
        assert [i.kind for i in w.issues] == ["duplicate"]
        assert (w.root / "pkg/x.py").read_bytes() == b"first"


def test_corrupt_member_is_an_issue(tmp_path: Path) -> None:
    data = bytes(range(256)) * 64
    wheel = make(tmp_path, [("pkg/a.bin", data), ("pkg/b.py", b"ok")])
    with zipfile.ZipFile(wheel) as zf:
        info = zf.getinfo("pkg/a.bin")
    blob = bytearray(wheel.read_bytes())
    start = info.header_offset + 30 + len(info.filename) + len(info.extra) + info.compress_size // 2
    for i in range(start, start + 8):
        blob[i] ^= 0xFF
    wheel.write_bytes(bytes(blob))
    with open_wheel(wheel, write_all=True) as w:
        assert [i.kind for i in w.issues] == ["corrupt"]
        assert not (w.root / "pkg/a.bin").exists(), "a partial file is removed"
        assert (w.root / "pkg/b.py").read_bytes() == b"ok"


@pytest.mark.parametrize("content", [b"", b"not a zip", b"PK\x03\x04truncated"])
def test_unreadable_archive_is_bad_input(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / NAME
    path.write_bytes(content)
    with pytest.raises(InputError, match="not a readable zip archive"), open_wheel(path):
        pass


def test_bad_file_name_is_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "not-a-wheel.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("x", b"")
    with pytest.raises(InputError, match="not a wheel file name"), open_wheel(path):
        pass


def test_missing_file_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such wheel"), open_wheel(tmp_path / NAME):
        pass


def test_tree_removed_on_error(tmp_path: Path) -> None:
    wheel = make(tmp_path, [("pkg/x.py", b"")])
    roots: list[Path] = []
    with pytest.raises(RuntimeError), open_wheel(wheel) as w:
        roots.append(w.root)
        raise RuntimeError("boom")
    assert not roots[0].exists()


def test_keep_for_debugging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(KEEP_ENV, "1")
    wheel = make(tmp_path, [("pkg/x.py", b"")])
    with open_wheel(wheel, workdir=tmp_path) as w:
        root = w.root
    assert root.is_dir()
    assert str(root.parent) in capsys.readouterr().err


def test_on_extracted_called_for_every_file(tmp_path: Path) -> None:
    wheel = make(tmp_path, [(f"pkg/m{i}.py", b"x" * i) for i in range(20)])
    seen: list[str] = []
    with open_wheel(wheel, on_extracted=lambda m: seen.append(m.name), threads=4, write_all=True) as w:
        assert sorted(seen) == sorted(m.name for m in w.members)
        assert all((w.root / m.name).is_file() for m in w.members)


def test_dist_info_and_metadata(tmp_path: Path) -> None:
    wheel = make(tmp_path, [("pkg/x.py", b""), ("pkg-1.0.dist-info/METADATA", b"Name: pkg\nVersion: 1.0\n")])
    with open_wheel(wheel) as w:
        assert w.dist_info == "pkg-1.0.dist-info"
        assert w.metadata is not None and "Name: pkg" in w.metadata


def test_writes_only_what_checks_read(tmp_path: Path) -> None:
    elf = b"\x7fELF" + b"\0" * 64
    wheel = make(
        tmp_path,
        [
            ("pkg/__init__.py", b"x = 1\n"),
            ("pkg/bin/tool", elf),  # an ELF executable: found by its content
            ("pkg/lib/libtext.so", b"INPUT(libk.so.1)\n"),  # named like a library: written, whatever it is
            ("pkg/include/pkg.h", b"int f(void);\n"),
            ("pkg-1.0.dist-info/METADATA", b"Name: pkg\n"),
        ],
    )
    with open_wheel(wheel) as w:
        by = {m.name: m for m in w.members}
        assert by["pkg/__init__.py"].path is None and by["pkg/__init__.py"].read
        assert by["pkg/__init__.py"].sha256 == hashlib.sha256(b"x = 1\n").digest()
        assert by["pkg/bin/tool"].path is not None and by["pkg/bin/tool"].is_elf
        assert by["pkg/lib/libtext.so"].path is not None
        assert by["pkg/include/pkg.h"].path is None and by["pkg/include/pkg.h"].data == b"int f(void);\n"
        assert by["pkg-1.0.dist-info/METADATA"].path is not None
        assert not (w.root / "pkg" / "__init__.py").exists()


def test_other_record_algorithms_are_computed_in_the_pass(tmp_path: Path) -> None:
    record = "pkg/x.py,sha512=abc,1\npkg-1.0.dist-info/RECORD,,\n"
    wheel = make(tmp_path, [("pkg/x.py", b"x"), ("pkg-1.0.dist-info/RECORD", record.encode())])
    with open_wheel(wheel) as w:
        x = next(m for m in w.members if m.name == "pkg/x.py")
        assert x.digests == {"sha512": hashlib.sha512(b"x").digest()}
