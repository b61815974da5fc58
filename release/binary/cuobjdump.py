"""Cross-check mode: list device code with NVIDIA's ``cuobjdump``.

The audit reads device code with :mod:`release.binary.fatbin`; this module runs
``cuobjdump`` on the same file so the two can be compared entry by entry.

cuobjdump quirks handled here (cuobjdump 13.2.86, ``nvidia-cuda-cuobjdump``):

* one file per call: with two files it prints its usage and exits 0, so every
  call names exactly one file, as an absolute path (a name starting with ``-``
  would be read as an option);
* exit 255 with ``does not contain device code`` for a file without device code,
  but also for a text file or a *truncated* ELF file: the exit code is never
  how "has device code" is decided (that is :func:`release.binary.fatbin.has_device_code`);
* exit 1 with ``fatal`` for a missing or unreadable file, an empty file, an
  unknown option;
* exit 0 with nothing on stdout and an info line ``No ELF file found`` /
  ``No PTX file found`` on stderr when that kind is absent; exit 0 with usage
  text on stdout is a failed call, never an empty listing;
* warnings such as ``Can't deobfuscate entry`` (LTO-IR entries) on stderr with
  exit 0 do not change the listing;
* a family cubin ``sm_100f`` is listed as ``sm_100`` (the ``f`` is lost); an
  arch-specific cubin keeps its ``a``; PTX is listed as ``sm_XY[a|f].ptx`` and
  keeps both suffixes. LTO-IR entries are not listed by ``--list-elf`` or
  ``--list-ptx``;
* it reads the executable device code (``.nv_fatbin``) when there is any, else the
  relocatable (``__nv_relfatbin``); ``-all`` reads both;
* without an option it prints each entry's header (:func:`header_dump`): ``Fatbin elf
  code:`` / ``ptx`` / ``nvvm``, ``arch = sm_100f`` (the ``f`` kept, for PTX too),
  ``code version = [9,2]`` (a PTX entry's PTX ISA) and a line ``compressed``; a ``.cubin``
  file prints nothing there, a ``.ptx`` file "does not contain device code".

So :func:`expected_listing` renders a fatbin table the way cuobjdump prints it
(SASS ``f`` dropped, LTO-IR left out) and :func:`expected_headers` the way its header
dump does, before :func:`cross_check` compares.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import site
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from release.binary.elf import read_elf
from release.binary.fatbin import FatbinEntry, read_fatbins
from release.core import proc
from release.core.errors import InputError, StepFailed, ToolError

CUOBJDUMP_PACKAGE = "nvidia-cuda-cuobjdump"
CUOBJDUMP_VERSION = "13.2.86"
# Where the nvidia-cuda-cuobjdump wheel puts the binary, under site-packages.
WHEEL_BINARY = Path("nvidia", "cu13", "bin", "cuobjdump")

ListedKind = Literal["sass", "ptx"]
DeviceCode = tuple[ListedKind, str]

_LINE = re.compile(
    r"^(?P<what>ELF|PTX) file\s+(?P<index>\d+): (?P<file>.*)\."
    r"(?P<target>sm_(?P<arch>\d+)(?P<variant>[af]?))\.(?P<ext>cubin|ptx)$"
)
_USAGE = re.compile(r"^\s*Usage\s*:", re.MULTILINE)
_NO_DEVICE_CODE = "does not contain device code"
_MODES: dict[ListedKind, tuple[str, str, str]] = {
    # kind: (option, word on stdout, extension)
    "sass": ("--list-elf", "ELF", "cubin"),
    "ptx": ("--list-ptx", "PTX", "ptx"),
}
DEFAULT_TIMEOUT = 1800.0


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _site_dirs() -> list[Path]:
    dirs: list[str] = [*sys.path]
    with contextlib.suppress(AttributeError):  # absent in some embedded interpreters
        dirs.extend(site.getsitepackages())
    dirs.append(site.getusersitepackages())
    seen: set[Path] = set()
    out: list[Path] = []
    for d in dirs:
        if not d:
            continue
        p = Path(d)
        if p not in seen:
            seen.add(p)
            out.append(p)
    return out


def _cache_target(cache_dir: str | os.PathLike[str]) -> Path:
    return Path(cache_dir) / f"cuobjdump-{CUOBJDUMP_VERSION}"


def find_cuobjdump(cache_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """Locate cuobjdump: ``$CUOBJDUMP``, PATH, an installed wheel, then ``cache_dir``.

    A ``$CUOBJDUMP`` that is set but not an executable file is a ToolError, never
    silently replaced by another copy.
    """
    env = os.environ.get("CUOBJDUMP")
    if env:
        p = Path(env)
        if not _executable(p):
            raise ToolError(f"CUOBJDUMP={env} is not an executable file")
        return p.absolute()
    on_path = shutil.which("cuobjdump")
    if on_path:
        return Path(on_path).absolute()
    for d in _site_dirs():
        candidate = d / WHEEL_BINARY
        if _executable(candidate):
            return candidate.absolute()
    if cache_dir is not None:
        candidate = _cache_target(cache_dir) / WHEEL_BINARY
        if _executable(candidate):
            return candidate.absolute()
    return None


def ensure_cuobjdump(cache_dir: str | os.PathLike[str]) -> Path:
    """Return a cuobjdump, pip-installing the pinned wheel into ``cache_dir`` once.

    The install ignores this machine's pip configuration (``PIP_CONFIG_FILE=/dev/null``
    and ``--isolated``), goes to a temporary folder, and is moved into place only
    when complete, so an interrupted install is never mistaken for a good one.
    """
    found = find_cuobjdump(cache_dir)
    if found is not None:
        return found
    target = _cache_target(cache_dir)
    staging = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(staging, ignore_errors=True)
    env = dict(os.environ)
    env["PIP_CONFIG_FILE"] = os.devnull
    spec = f"{CUOBJDUMP_PACKAGE}=={CUOBJDUMP_VERSION}"
    try:
        proc.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--isolated",
                "--no-input",
                "--disable-pip-version-check",
                "--target",
                str(staging),
                spec,
            ],
            env=env,
        )
    except StepFailed as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise ToolError(f"cannot install {spec} into {target}: {exc}") from exc
    if not _executable(staging / WHEEL_BINARY):
        shutil.rmtree(staging, ignore_errors=True)
        raise ToolError(f"{spec} installed but {WHEEL_BINARY} is not in it")
    try:
        staging.rename(target)
    except OSError:
        # Another process finished first; use its copy.
        shutil.rmtree(staging, ignore_errors=True)
    binary = target / WHEEL_BINARY
    if not _executable(binary):
        raise ToolError(f"cuobjdump is missing from {target} after installing {spec}")
    return binary.absolute()


def _resolve(cuobjdump: str | os.PathLike[str] | None) -> Path:
    if cuobjdump is not None:
        p = Path(cuobjdump)
        if not _executable(p):
            raise ToolError(f"cuobjdump {p} is not an executable file")
        return p.absolute()
    found = find_cuobjdump()
    if found is None:
        raise ToolError(
            "cuobjdump was not found: set CUOBJDUMP, put it on PATH, or install "
            f"{CUOBJDUMP_PACKAGE}=={CUOBJDUMP_VERSION}"
        )
    return found


def cuobjdump_version(cuobjdump: str | os.PathLike[str] | None = None) -> str:
    """The release line cuobjdump prints, e.g. ``Cuda compilation tools, release 13.2, ...``."""
    tool = _resolve(cuobjdump)
    result = proc.run([tool, "--version"], check=False)
    for line in result.stdout.splitlines():
        if "release" in line:
            return line.strip()
    raise ToolError(f"{tool} --version printed no release line (exit {result.returncode})")


def _tail(text: str, lines: int = 5) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def parse_listing(kind: ListedKind, path: Path, result: proc.Result) -> tuple[DeviceCode, ...]:
    """Interpret one ``cuobjdump --list-elf|--list-ptx <path>`` run (see the module doc)."""
    option, word, ext = _MODES[kind]
    where = f"cuobjdump {option} {path}"
    rc, out, err = result.returncode, result.stdout, result.stderr
    if rc == 255:
        if _NO_DEVICE_CODE in err:
            return ()
        raise ToolError(f"{where} exited 255 without saying why:\n{_tail(err or out)}")
    if rc == 1:
        if "Could not open input file" in err or "Invalid" in err:
            raise InputError(f"{path}: cuobjdump cannot read it: {_tail(err)}")
        raise ToolError(f"{where} failed (exit 1):\n{_tail(err or out)}")
    if rc != 0:
        raise ToolError(f"{where} failed (exit {rc}):\n{_tail(err or out)}")
    if _USAGE.search(out):
        raise ToolError(f"{where} printed its usage instead of a listing (exit 0)")
    entries: list[DeviceCode] = []
    for line in out.splitlines():
        if not line.strip():
            continue
        m = _LINE.match(line.strip())
        if m is None or m["what"] != word or m["ext"] != ext:
            raise ToolError(f"{where} printed a line that is not a {word} listing: {line!r}")
        if int(m["index"]) != len(entries) + 1:
            raise ToolError(f"{where} listed entry {m['index']} after {len(entries)} entries: {line!r}")
        target = m["target"]
        name = target if kind == "sass" else "compute_" + target.removeprefix("sm_")
        entries.append((kind, name))
    if not entries and f"No {word} file found" not in err:
        raise ToolError(
            f"{where} exited 0 with no {word} entries and no 'No {word} file found' line:\n"
            f"{_tail(err or out) or '(no output)'}"
        )
    return tuple(entries)


def _list(tool: Path, path: Path, kind: ListedKind, timeout: float) -> tuple[DeviceCode, ...]:
    option = _MODES[kind][0]
    return parse_listing(kind, path, proc.run([tool, option, path], check=False, timeout=timeout))


def list_device_code(
    path: str | os.PathLike[str],
    *,
    cuobjdump: str | os.PathLike[str] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> tuple[DeviceCode, ...]:
    """Device code cuobjdump lists for one file: SASS (``--list-elf``) then PTX.

    Each item is ``("sass", "sm_90a")`` or ``("ptx", "compute_120")``, in cuobjdump's
    order. A file without device code gives ``()``. A missing file is an InputError;
    a usage text, an unknown output line or an unexplained exit is a ToolError.
    """
    p = Path(path).absolute()
    if not p.is_file():
        raise InputError(f"{p}: not a file")
    tool = _resolve(cuobjdump)
    return _list(tool, p, "sass", timeout) + _list(tool, p, "ptx", timeout)


def cuobjdump_name(entry: FatbinEntry) -> str:
    """The name cuobjdump gives an entry: family cubins lose their ``f``."""
    if entry.kind == "sass" and entry.variant == "f":
        return f"sm_{entry.arch}"
    return entry.name


def expected_listing(entries: Iterable[FatbinEntry]) -> tuple[DeviceCode, ...]:
    """Render fatbin entries as list_device_code would list them (LTO-IR omitted)."""
    entries = tuple(entries)
    sass: list[DeviceCode] = [("sass", cuobjdump_name(e)) for e in entries if e.kind == "sass"]
    ptx: list[DeviceCode] = [("ptx", cuobjdump_name(e)) for e in entries if e.kind == "ptx"]
    return (*sass, *ptx)


# (kind word, arch as the header dump prints it, PTX ISA or None, compressed)
HeaderEntry = tuple[str, str, tuple[int, int] | None, bool]
_BLOCK = re.compile(r"^Fatbin (elf|ptx|nvvm) code:$")
_WORDS = {"sass": "elf", "ptx": "ptx", "ltoir": "nvvm"}


def parse_header_dump(path: Path, result: proc.Result) -> tuple[HeaderEntry, ...]:
    """Interpret ``cuobjdump <path>`` (no option): one :data:`HeaderEntry` per ``Fatbin ... code:`` block."""
    where = f"cuobjdump {path}"
    if result.returncode == 255 and _NO_DEVICE_CODE in result.stderr:
        return ()
    if result.returncode != 0:
        raise ToolError(
            f"{where} failed (exit {result.returncode}):\n{_tail(result.stderr or result.stdout)}"
        )
    out: list[HeaderEntry] = []
    block: dict[str, object] | None = None

    def flush() -> None:
        if block is not None:
            if "arch" not in block:
                raise ToolError(f"{where} printed a {block['kind']} block without an arch line")
            version = block.get("version") if block["kind"] == "ptx" else None
            out.append((str(block["kind"]), str(block["arch"]), version, bool(block.get("compressed"))))  # type: ignore[arg-type]

    for raw in result.stdout.splitlines():
        line = raw.strip()
        if m := _BLOCK.match(line):
            flush()
            block = {"kind": m[1]}
        elif block is None or not line or set(line) == {"="}:
            continue
        elif line.startswith("arch = "):
            block["arch"] = line.removeprefix("arch = ").strip()
        elif line.startswith("code version = "):
            nums = re.findall(r"\d+", line)
            block["version"] = (int(nums[0]), int(nums[1])) if len(nums) == 2 else None
        elif line == "compressed":
            block["compressed"] = True
    flush()
    return tuple(out)


def header_dump(path: str | os.PathLike[str], *, cuobjdump: str | os.PathLike[str] | None = None,
                timeout: float = DEFAULT_TIMEOUT) -> tuple[HeaderEntry, ...]:  # fmt: skip
    """Each entry's header as cuobjdump prints it (arch with its a/f suffix, PTX ISA, compressed)."""
    p = Path(path).absolute()
    tool = _resolve(cuobjdump)
    return parse_header_dump(p, proc.run([tool, p], check=False, timeout=timeout))


def expected_headers(entries: Iterable[FatbinEntry]) -> tuple[HeaderEntry, ...]:
    """Fatbin entries as :func:`header_dump` prints them (``arch = sm_90a`` for PTX compute_90a too)."""
    return tuple(
        (_WORDS[e.kind], f"sm_{e.arch}{e.variant}", e.ptx_isa if e.kind == "ptx" else None, e.compressed)
        for e in entries
    )


@dataclass(frozen=True)
class CrossCheck:
    """The fatbin reader's table next to cuobjdump's listing (and header dump) for one file."""

    path: str
    ours: tuple[DeviceCode, ...]
    theirs: tuple[DeviceCode, ...]
    our_headers: tuple[HeaderEntry, ...] = ()
    their_headers: tuple[HeaderEntry, ...] = ()

    @property
    def same_entries(self) -> bool:
        """Same entries with the same multiplicity, and the same headers (variant, PTX ISA, compression)."""
        return Counter(self.ours) == Counter(self.theirs) and self.our_headers == self.their_headers

    @property
    def same_order(self) -> bool:
        return self.ours == self.theirs

    def differences(self) -> list[str]:
        """One line per target whose count differs, then per header that differs; empty when they agree."""
        ours, theirs = Counter(self.ours), Counter(self.theirs)
        out = []
        for key in sorted(set(ours) | set(theirs)):
            if ours[key] != theirs[key]:
                kind, name = key
                out.append(f"{kind} {name}: fatbin reader {ours[key]}, cuobjdump {theirs[key]}")
        if self.our_headers != self.their_headers:
            if len(self.our_headers) != len(self.their_headers):
                out.append(
                    f"header dump: fatbin reader {len(self.our_headers)} entries, cuobjdump {len(self.their_headers)}"
                )
            for i, (a, b) in enumerate(zip(self.our_headers, self.their_headers, strict=False)):
                if a != b:
                    out.append(
                        f"header {i + 1}: fatbin reader {_header_text(a)}, cuobjdump {_header_text(b)}"
                    )
                    if len(out) > 20:
                        break
        return out


def _header_text(h: HeaderEntry) -> str:
    kind, arch, isa, compressed = h
    isa_text = f" PTX ISA {isa[0]}.{isa[1]}" if isa else ""
    return f"{kind} {arch}{isa_text}{' compressed' if compressed else ''}"


def default_entries(path: str | os.PathLike[str]) -> tuple[FatbinEntry, ...]:
    """The entries cuobjdump reads by default: the executable fatbin's, else the relocatable one's."""
    info = read_elf(path)
    entries = [e for fb in read_fatbins(path, info) for e in fb.entries]
    if not entries:
        entries = [e for fb in read_fatbins(path, info, relocatable=True) for e in fb.entries]
    return tuple(entries)


def cross_check(
    path: str | os.PathLike[str],
    *,
    cuobjdump: str | os.PathLike[str] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    entries: Iterable[FatbinEntry] | None = None,
    headers: bool = True,
) -> CrossCheck:
    """Read the file with both the fatbin reader and cuobjdump (its listings and its header dump).

    The fatbin side is rendered with :func:`expected_listing` (``sm_100f`` shown as
    ``sm_100``, LTO-IR left out) and :func:`expected_headers` so the two compare like for like.
    ``entries``: the reader's entries when the caller has them (a ``.cubin`` or ``.fatbin`` file).
    """
    mine = tuple(entries) if entries is not None else default_entries(path)
    theirs = list_device_code(path, cuobjdump=cuobjdump, timeout=timeout)
    if not headers:
        return CrossCheck(str(path), expected_listing(mine), theirs)
    dumped = header_dump(path, cuobjdump=cuobjdump, timeout=timeout)
    return CrossCheck(str(path), expected_listing(mine), theirs, expected_headers(mine), dumped)
