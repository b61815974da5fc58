"""Build and toolkit paths in a wheel's text members (release.audit.reading.buildpaths)."""

from __future__ import annotations

import pytest

from release.audit.reading.buildpaths import scanner_for


def scan(name: str, text: bytes, chunk: int = 1 << 20) -> tuple[str, ...]:
    scanner = scanner_for(name)
    assert scanner is not None, name
    for i in range(0, len(text), chunk):
        scanner.feed(text[i : i + chunk])
    return scanner.close()


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("pkg/_build.py", b'BUILD_DIR = "/tmp/tmpab12cd34/build"\n'),
        ("pkg/_build.py", b"ROOT = '/home/runner/work/pkg/pkg'\n"),
        ("pkg/conf.json", b'{"cuda": "/usr/local/cuda-13.0/lib64"}\n'),
        ("pkg.pth", b"/__w/pkg/pkg/src\n"),
        (
            "torch/share/cmake/ATen/ATenConfig.cmake",
            b'set(ATEN_INCLUDE_DIR "/tmp/tmpzagopw2n/wheel/platlib")\n',
        ),
        ("pkg-1.0.data/scripts/run", b"#!/bin/sh\nexec /home/alice/venv/bin/python -m pkg\n"),
        ("pkg/build.txt", b"built in /tmp/pip-build-env-abc123de/overlay\n"),
        # code, not an example: cumm 0.6.3's cumm/gemm/cutlasstest.py
        ("pkg/a.py", b'CUTLASS_ROOT = Path("/home/yy/Projects/cutlass")\n'),
        ("pkg/a.py", b'>>>x = "/home/alice/venv"\n'),  # no prompt: '>>>' must be followed by a blank
    ],
)
def test_a_build_machine_path_is_found(name: str, text: bytes) -> None:
    assert scan(name, text)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("pkg/a.py", b"# see /tmp/tmpab12cd34/build for the layout\n"),  # a comment
        ("pkg/a.py", b'    """input_code: /tmp/tmpof1n5g7t/5c/c5.cpp"""\n'[4:]),  # prose in a docstring
        ("pkg/a.py", b'URL = "https://example.org/home/runner/work/"\n'),  # part of a URL
        ("pkg/a.py", b"cuda_home = '/usr/local/cuda'\n"),  # a conventional default, not a build machine's
        ("pkg/a.py", b'LOG = "/tmp/output.txt"\n'),  # a run-time temporary file
        # a docstring's example (torchaudio 2.11.1): a user's path, shown after a doctest prompt
        (
            "pkg/a.py",
            b'        >>> dataset = torchaudio.datasets.LibriMix("/home/datasets/", subset="test")\n',
        ),
        ("pkg/a.py", b'    ...     root="/home/alice/data",\n'),
        ("pkg/data.bin.txt", b"\0\0/tmp/tmpab12cd34/x\n"),  # binary
    ],
)
def test_prose_comments_urls_and_defaults_are_not(name: str, text: bytes) -> None:
    assert scan(name, text) == ()


def test_a_line_split_across_chunks_is_found() -> None:
    text = b"x = 1\n" * 1000 + b'BUILD = "/tmp/tmpab12cd34/build"\n' + b"y = 2\n" * 10
    assert scan("pkg/a.py", text, chunk=4093) == ('BUILD = "/tmp/tmpab12cd34/build"',)


def test_which_members_are_scanned() -> None:
    assert scanner_for("pkg/include/pkg.h") is None and scanner_for("pkg/include/x.json") is None
    assert scanner_for("pkg/lib/libk.so") is None and scanner_for("pkg/data.bin") is None
    assert scanner_for("pkg/__init__.py") is not None and scanner_for("pkg-1.0.data/scripts/tool") is not None
