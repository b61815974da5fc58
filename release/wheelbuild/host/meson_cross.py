"""meson's own cross mechanism for a cross build: a cross file naming the target's compilers and CPU.

meson-python takes it as a config setting (``setup-args``, :func:`release.wheelbuild.host.cross.config_settings`).
:func:`meson_cross_text` is pure; :func:`write_meson_cross` writes it into the cache once.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from release.core.errors import ToolError
from release.core.locks import install_once
from release.resources.cpus import arch as cpu_arch


def meson_cross_text(arch: str, triplet: str, cc: Path, cxx: Path, nvcc: Path | None) -> str:
    """A meson cross file for the target: without one meson takes the cross compilers for native
    ones and stops when the programs they make do not run here ("Executables created by c compiler
    ... are not runnable"); with one it builds for ``host_machine`` and runs nothing it compiled."""
    tools = {"c": str(cc), "cpp": str(cxx), "ar": str(cc.with_name(f"{triplet}-ar"))}
    tools["strip"] = str(cc.with_name(f"{triplet}-strip"))
    if nvcc is not None:
        tools["cuda"] = str(nvcc)
    binaries = "".join(f"{k} = {_meson_str(v)}\n" for k, v in tools.items())
    cpu = cpu_arch(arch)
    if cpu is None:
        raise ToolError(f"no meson CPU is known for {arch} (release/resources/cpus.toml)")
    return (
        "# wheelwright: the target of a cross build (release/wheelbuild/host/meson_cross.py)\n"
        f"[binaries]\n{binaries}\n"
        "[host_machine]\nsystem = 'linux'\n"
        f"cpu_family = {_meson_str(cpu.meson_cpu_family)}\ncpu = {_meson_str(cpu.meson_cpu)}\n"
        f"endian = {_meson_str('little' if cpu.little_endian else 'big')}\n"
    )


def _meson_str(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def write_meson_cross(text: str, arch: str, cache_dir: Path) -> Path:
    """``text`` as a meson cross file in the cache (named by its hash, made once)."""
    key = hashlib.sha256(text.encode()).hexdigest()[:16]
    final = cache_dir / "cross" / arch / f"meson-{key}"

    def fill(tmp: Path) -> None:
        (tmp / "cross.ini").write_text(text, encoding="utf-8")

    install_once(
        final, ready=lambda f: (f / "cross.ini").is_file(), fill=fill, holder=f"the {arch} meson cross file"
    )
    return final / "cross.ini"
