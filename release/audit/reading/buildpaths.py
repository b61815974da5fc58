"""Build and toolkit paths written into a wheel's text files: the build machine leaking into the wheel.

RPATHs are the loader's business (:mod:`release.audit.checks.loader`); this module looks at the text
members a user's Python or tools read: ``.py``, ``.pth``, ``.json``, ``.txt``, ``.cfg``, ``.toml``,
``.cmake``, ``.pc``, shell scripts and the ``*.data/scripts/`` a wheel installs. A path counts when it
lies under a directory that exists only on a build machine:

* temporary build trees: Python's ``/tmp/tmpXXXXXXXX``, pip's ``/tmp/pip-*-XXXXXXXX``, cibuildwheel's
  and wheelwright's own, ``/var/tmp/...``;
* CI workspaces: ``/home/runner/work``, ``/__w``, ``/github/workspace``, GitLab's ``/builds/...``,
  Jenkins', self-hosted runners';
* a user's home (``/home/<name>/``);
* a versioned CUDA toolkit install (``/usr/local/cuda-13.0/``) or the HPC SDK.

and it is a value, not prose: in a ``.py`` file a string literal that starts with it, never on a
doctest line (``>>>``, ``...``: a docstring's example); elsewhere a quoted string, an assignment, a
CMake argument or a line of its own; never a comment line. (torch
2.14.1's ``ATenConfig.cmake`` sets ``ATEN_INCLUDE_DIR "/tmp/tmpzagopw2n/wheel/platlib/torch/include"``.)

The extraction pass feeds every such member through a :class:`Scanner` in chunks
(:mod:`release.audit.reading.archive`); a cheap substring test skips chunks with nothing to look at.
"""

from __future__ import annotations

import re

__all__ = ["TEXT_SUFFIXES", "Scanner", "scanner_for"]

TEXT_SUFFIXES = (
    ".py",
    ".pth",
    ".json",
    ".txt",
    ".cfg",
    ".toml",
    ".cmake",
    ".pc",
    ".sh",
    ".ini",
    ".yaml",
    ".yml",
)
MAX_HITS = 5  # lines kept per member
_TAIL = 4096  # bytes of a line carried into the next chunk

# One search for any root (much faster than a substring test per root: the regex engine scans for '/')
_ANY_ROOT = re.compile(
    rb"/(?:tmp/|var/tmp/|home/|__w/|github/workspace|builds/|usr/local/cuda-|opt/nvidia/hpc_sdk|var/lib/jenkins/"
    rb"|opt/actions-runner/|actions-runner/_work/)"
)
_ROOTS = (
    rb"/tmp/(?:tmp[a-z0-9_]{8}|pip-[a-z-]+-[a-z0-9_]{6,}|build-env-[\w]+|cibw[\w-]*|wheelwright-[\w.-]+)(?=[/\"'\s:;)]|$)"
    rb"|/var/tmp/[\w.-]+"
    rb"|/home/runner/work/|/__w/[\w.-]+|/github/workspace(?=[/\"'\s]|$)|/builds/[\w.-]+/"
    rb"|/var/lib/jenkins/workspace/|/opt/actions-runner/_work/|/actions-runner/_work/"
    rb"|/home/[a-z_][\w.-]*/"
    rb"|/usr/local/cuda-\d+\.\d+(?=[/\"'\s:;)]|$)|/opt/nvidia/hpc_sdk/"
)
# where a value starts: a quote; or (not in .py files) '=', '(', whitespace or the line start
_QUOTED = re.compile(rb"[\"'](" + _ROOTS + rb")")
_VALUE = re.compile(rb"(?:^|[\"'=(\s:;,])(" + _ROOTS + rb")")
_COMMENT = re.compile(rb"^\s*(?:#|//|;|--)")
# a docstring's example in a .py file: a doctest prompt (torchaudio 2.11.1's
# '>>> dataset = torchaudio.datasets.LibriMix("/home/datasets/", ...)' shows a user's path, not the build's)
_DOCTEST = re.compile(rb"^\s*(?:>>>|\.\.\.)(?:\s|$)")


def scanner_for(name: str) -> Scanner | None:
    """A scanner for a member that is a text file users or tools read, else None."""
    base = name.rsplit("/", 1)[-1]
    parts = name.split("/")
    script = len(parts) > 2 and parts[0].endswith(".data") and parts[1] == "scripts"
    if "/include/" in f"/{name}":
        return None  # C++ headers: the cpp_consumer check's
    if base.endswith(TEXT_SUFFIXES) or script:
        return Scanner(python=base.endswith(".py"))
    return None


class Scanner:
    """Feed a member's bytes in chunks; ``hits`` are the first lines holding a build path."""

    def __init__(self, *, python: bool) -> None:
        self.pattern = _QUOTED if python else _VALUE
        self.prose = _DOCTEST if python else None
        self.hits: list[str] = []
        self.count = 0
        self._tail = b""

    def feed(self, chunk: bytes) -> None:
        data = self._tail + chunk
        cut = data.rfind(b"\n")
        if cut == -1:
            self._tail = data[-_TAIL:]
            return
        self._tail = data[cut + 1 :][-_TAIL:]
        self._scan(data[: cut + 1])

    def close(self) -> tuple[str, ...]:
        if self._tail:
            self._scan(self._tail)
            self._tail = b""
        return tuple(self.hits)

    def _scan(self, data: bytes) -> None:
        if b"\0" in data[:1024]:
            return
        at = 0
        while (m := _ANY_ROOT.search(data, at)) is not None:
            start = data.rfind(b"\n", 0, m.start()) + 1
            end = data.find(b"\n", m.end())
            end = len(data) if end == -1 else end
            line = data[start:end]
            at = end + 1
            if _COMMENT.match(line) or self.pattern.search(line) is None:
                continue
            if self.prose is not None and self.prose.match(line):
                continue
            self.count += 1
            if len(self.hits) < MAX_HITS:
                self.hits.append(line.strip()[:200].decode("utf-8", errors="replace"))
