"""Why a cross link failed, when it met a file of another machine: every shape the GNU linkers print.

A cross link that is handed a library or object of this machine stops with one of (GNU ld, bfd):

- ``skipping incompatible /x/libc10.so when searching for -lc10`` (then ``cannot find -lc10``);
- ``/usr/local/cuda/lib64/libcudart.so: error adding symbols: file in wrong format``;
- ``/x/k.o: Relocations in generic ELF (EM: 62)`` (an object of another machine, EM its e_machine);
- ``/x/libfoo.so: file in wrong format``;

and gold's ``/x/libfoo.so: incompatible target``, lld's ``/x/libfoo.so is incompatible with
elf64-littleaarch64``. The build log names the file far below the compiler's output; the diagnosis
says it first, with the file's ELF machine (read from the file where it still exists, else from
the ``EM:`` the linker printed).

:func:`wrong_machine_files` and :func:`link_diagnosis` are pure over the log's text apart from
reading the named files' ELF headers.
"""

from __future__ import annotations

import re
from pathlib import Path

from release.binary.elf import MACHINE_NAMES
from release.wheelbuild.host.cmake_toolchain import file_machine

_SHAPES = (
    re.compile(r"skipping incompatible (?P<path>\S+) when searching for (?P<flag>-l\S+)"),
    re.compile(r"(?P<path>[^\s:]+): Relocations in generic ELF \(EM: (?P<em>\d+)\)"),
    re.compile(r"(?P<path>[^\s:]+): (?:error adding symbols: )?file in wrong format"),
    re.compile(r"(?P<path>[^\s:]+): incompatible target"),
    re.compile(r"(?P<path>[^\s:]+) is incompatible with \S+"),
)
_MEMBER = re.compile(r"^(?P<file>.+?)\((?P<member>[^()]+)\)$")


def _machine(path: str, em: str | None) -> str:
    if em is not None:
        return MACHINE_NAMES.get(int(em), f"machine {em}")
    m = _MEMBER.match(path)
    file = Path(m["file"] if m else path)
    try:
        machine = file_machine(file) if file.is_file() else None
    except OSError:
        machine = None
    if machine is None:
        return ""  # the file is gone (a temporary build folder): the linker's words are all there is
    return MACHINE_NAMES.get(machine, f"machine {machine}")


def wrong_machine_files(output: str) -> list[tuple[str, str | None, str]]:
    """(path, ``-l`` flag or None, ELF machine or "" where it cannot be read) of each file a failed
    link says is of another machine, in the order the log names them, each path once."""
    found: dict[str, tuple[str | None, str | None]] = {}
    for line in output.splitlines():
        for shape in _SHAPES:
            m = shape.search(line)
            if m is None:
                continue
            groups = m.groupdict()
            flag, em = groups.get("flag"), groups.get("em")
            old = found.get(m["path"], (None, None))
            found[m["path"]] = (old[0] or flag, old[1] or em)
            break
    return [(path, flag, _machine(path, em)) for path, (flag, em) in found.items()]


def link_diagnosis(output: str, arch: str) -> str | None:
    """What a failed cross build's log says when the linker met files of another machine than
    ``arch``, naming each file and its ELF machine; None when it says nothing of the kind."""
    found = [f for f in wrong_machine_files(output) if f[2] != arch]
    if not found:
        return None
    named = ", ".join(
        f"{Path(path).name} ({', '.join(part for part in (flag, path, machine) if part)})"
        for path, flag, machine in found[:3]
    )
    more = f" and {len(found) - 3} more" if len(found) > 3 else ""
    return (
        f"the link needs libraries of this machine's architecture, not {arch}: {named}{more}. A build "
        "requirement with native libraries that the extension links (torch, for a PyTorch extension) is "
        "installed for this machine, or the build found this machine's CUDA toolkit (a CMake project: "
        "CMAKE_TOOLCHAIN_FILE names the cross toolchain; a project that sets its own library paths must take "
        f"them from CUDA_HOME). Build this row with --backend container (its {arch} builder image, "
        f"under emulation here) or on an {arch} machine"
    )
