"""Which wheel does a user's installer pick? pip and uv, asked for real against real indexes.

A CUDA variant is published on its own index; its CUDA runtime packages come from the default
index. A user names both, and the installer chooses between the CPU wheel (default index) and
the CUDA wheel (``1.0+cu130`` on the CUDA index):

- **pip** looks at every index and takes the best version; ``1.0+cu130`` sorts above ``1.0``,
  so either index order gives the CUDA wheel;
- **uv** by default (``--index-strategy first-index``) takes a package from the first index
  that has it, and searches ``--extra-index-url`` before ``--index-url``: pip's line copied to
  uv gives the CPU wheel. With ``--index-strategy unsafe-best-match`` uv compares versions
  across indexes as pip does, in either order; that is the line printed for uv
  (docs/troubleshooting.md explains the alternatives).

:func:`install_cases` says which lines are printed and checked (pure); :func:`picked` runs
the installer and returns the wheel file it chose. uv is the pinned :data:`UV_PIN`: from this
environment when it has exactly that version, else installed once into the wheelwright cache.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path
from typing import Literal

from packaging.utils import canonicalize_name

from release.core.errors import StepFailed, ToolError
from release.core.locks import install_once
from release.core.log import info
from release.core.pip import NO_PIP_CONFIG, pip_install_target
from release.core.proc import run
from release.policy.matrix import Row
from release.resources.cpus import cpus
from release.smoke.evaluate import check_resolution

UV_VERSION = "0.13.8"
UV_PIN = f"uv=={UV_VERSION}"
UV_STRATEGY = "unsafe-best-match"  # compare versions across indexes, as pip does
Tool = Literal["pip", "uv"]
TOOLS: tuple[Tool, ...] = ("pip", "uv")


@dataclass(frozen=True)
class InstallCase:
    """One installer with its indexes in one order: a line a user types, and what it is checked with."""

    tool: Tool
    index_url: str
    extra_index_urls: tuple[str, ...] = ()

    def flags(self) -> list[str]:
        args = ["--index-url", self.index_url]
        for url in self.extra_index_urls:
            args += ["--extra-index-url", url]
        if self.tool == "uv" and self.extra_index_urls:
            args += ["--index-strategy", UV_STRATEGY]
        return args

    def line(self, project: str) -> str:
        """What the user types."""
        command = "pip install" if self.tool == "pip" else "uv pip install"
        return " ".join([command, project, *self.flags()])

    def replaced(self, urls: Mapping[str, str]) -> InstallCase:
        """The same case with URLs swapped (the default index -> the rehearsal's stand-in for it)."""
        return InstallCase(
            self.tool,
            urls.get(self.index_url, self.index_url),
            tuple(urls.get(u, u) for u in self.extra_index_urls),
        )


def install_cases(variant_index: str, default_index: str, *, cuda: bool) -> list[InstallCase]:
    """The printed line of each tool first, then the reversed index order (pure).

    A CPU wheel lives on the default index alone: one line per tool, no order to check."""
    if not cuda:
        return [InstallCase(tool, variant_index) for tool in TOOLS]
    cases = [InstallCase(tool, variant_index, (default_index,)) for tool in TOOLS]
    return cases + [InstallCase(tool, default_index, (variant_index,)) for tool in TOOLS]


def resolution_problem(row: Row, chosen: str, tool: Tool) -> str | None:
    """None when the installer chose this row's wheel; else what a user would wrongly get (pure)."""
    problem = check_resolution(row, chosen)
    return None if problem is None else problem.replace("pip picked", f"{tool} picked", 1)


# --------------------------------------------------------------------------- uv, pinned


def _uv_ok(binary: Path) -> bool:
    try:
        out = run([str(binary), "--version"], check=False, timeout=30, step="asking uv its version")
    except (ToolError, StepFailed):
        return False
    return out.returncode == 0 and out.stdout.split()[1:2] == [UV_VERSION]


def _from_this_environment() -> Path | None:
    try:
        if importlib.metadata.version("uv") != UV_VERSION:
            return None
        locate = getattr(importlib.import_module("uv"), "find_uv_bin", None)  # the package's own locator
        return Path(str(locate())) if callable(locate) else None
    except (importlib.metadata.PackageNotFoundError, ImportError, FileNotFoundError):
        return None


def find_uv(cache_dir: Path, env: Mapping[str, str]) -> Path:
    """The pinned uv: this environment's when it is exactly :data:`UV_PIN`, else
    ``<cache>/tools/uv-<version>/bin/uv``, installed there from PyPI on first use (atomically,
    under a lock). ToolError when it cannot be had."""
    here = _from_this_environment()
    if here is not None and _uv_ok(here):
        return here
    final = cache_dir / "tools" / UV_PIN.replace("==", "-")
    binary = final / "bin" / "uv"

    def fill(tmp: Path) -> None:
        info(f"==> installing {UV_PIN} into {final} (the uv install-resolution check)")
        try:
            pip_install_target([UV_PIN], tmp, env=env)
        except StepFailed as exc:
            raise ToolError(f"cannot install {UV_PIN} from the default index: {exc}") from None

    made = install_once(
        final,
        ready=lambda folder: (folder / "bin" / "uv").is_file() and _uv_ok(folder / "bin" / "uv"),
        fill=fill,
        holder=f"the install of {UV_PIN}",
        lock=final.with_name(final.name + ".lock"),  # <folder>.lock, as every release took it
    )
    if made and not _uv_ok(binary):
        raise ToolError(f"{binary} does not run as uv {UV_VERSION}; remove {final} and run again")
    return binary


# --------------------------------------------------------------------------- asking the installers


def _neutral_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """No pip or uv configuration of this machine (constraints, local indexes, strategies)."""
    env = {
        k: v for k, v in (os.environ if base is None else base).items() if not k.startswith(("PIP_", "UV_"))
    }
    return {**env, **NO_PIP_CONFIG, "UV_NO_CONFIG": "1"}


def _wheel_name_installed(target: Path) -> str:
    """The wheel file name of the one distribution installed in ``target``, from its
    ``.dist-info`` (name and version from METADATA, tags from WHEEL)."""
    infos = sorted(target.glob("*.dist-info"))
    if len(infos) != 1:
        raise StepFailed(f"uv installed {[p.name for p in infos]} into {target}; expected one distribution")
    meta = Parser().parsestr((infos[0] / "METADATA").read_text(encoding="utf-8"), headersonly=True)
    wheel = Parser().parsestr((infos[0] / "WHEEL").read_text(encoding="utf-8"), headersonly=True)
    tags = [t.split("-") for t in wheel.get_all("Tag") or []]
    if not tags or any(len(t) != 3 for t in tags):
        raise StepFailed(f"{infos[0]}/WHEEL names no valid Tag")
    parts = [".".join(dict.fromkeys(t[i] for t in tags)) for i in range(3)]
    name = re.sub(r"[-_.]+", "_", canonicalize_name(str(meta["Name"])))
    return f"{name}-{meta['Version']}-{'-'.join(parts)}.whl"


@dataclass(frozen=True)
class Target:
    """The machine an install line is checked for, when it is not this one (pure)."""

    platform_tag: str  # "manylinux_2_28_aarch64"
    python: str  # "3.13"

    def pip_flags(self) -> tuple[str, ...]:
        return ("--platform", self.platform_tag, "--python-version", self.python, "--implementation", "cp")

    def uv_flags(self) -> tuple[str, ...]:
        # uv names a manylinux target <arch>-manylinux_2_28
        cpu = cpus().of_platform_tag(self.platform_tag)
        arch = cpu.tag if cpu is not None else self.platform_tag.rpartition("_")[2]
        return (
            "--python-platform",
            f"{arch}-{self.platform_tag[: -len(arch) - 1]}",
            "--python-version",
            self.python,
        )


def picked(
    case: InstallCase,
    python: Path,
    requirement: str,
    *,
    uv: Path | None = None,
    workdir: Path | None = None,
    timeout: float = 600.0,
    target: Target | None = None,
) -> str:
    """The wheel file name ``case``'s installer picks for ``requirement`` on ``python``.

    pip: ``pip download --no-deps`` (the file it fetched). uv: ``uv pip install --target
    --no-deps`` (the distribution it installed; uv has no download command). With ``target``
    (another machine's platform and Python), each resolves for that machine as a user there
    would be served: pip's ``--platform``/``--python-version``, uv's ``--python-platform``."""
    tmp = Path(tempfile.mkdtemp(prefix="ww-resolve-", dir=workdir))
    what = f"resolving {requirement} with {case.tool} as a user would ({' '.join(case.flags())})"
    try:
        if case.tool == "pip":
            args = [
                str(python), "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--isolated",
                "--no-input", "--quiet", "-d", str(tmp / "got"), *case.flags(),
                *(target.pip_flags() if target else ()), requirement,
            ]  # fmt: skip
            run(args, env=_neutral_env(), timeout=timeout, step=what)
            got = sorted(p.name for p in (tmp / "got").glob("*.whl"))
            if len(got) != 1:
                raise StepFailed(f"pip downloaded {got} for {requirement}; expected one wheel")
            return got[0]
        if uv is None:
            raise ToolError("the uv check needs the pinned uv (release.smoke.resolve.find_uv)")
        args = [
            str(uv), "pip", "install", "--no-config", "--no-cache", "--quiet", "--python", str(python),
            "--target", str(tmp / "got"), "--no-deps", "--only-binary", ":all:", *case.flags(),
            *(target.uv_flags() if target else ()), requirement,
        ]  # fmt: skip
        run(args, env=_neutral_env(), timeout=timeout, step=what)
        return _wheel_name_installed(tmp / "got")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def resolved_wheel(
    python: Path,
    requirement: str,
    *,
    index_url: str,
    extra_index_urls: Sequence[str] = (),
    workdir: Path | None = None,
    timeout: float = 600.0,
) -> str:
    """The wheel file name pip picks for ``requirement`` with these indexes, as a user's pip would."""
    case = InstallCase("pip", index_url, tuple(extra_index_urls))
    return picked(case, python, requirement, workdir=workdir, timeout=timeout)
