"""``python -m release.wheelbuild.repair.auditwheel_as ARCH repair --only-plat --plat TAG [--exclude PAT]...
-w DIR WHEEL``: auditwheel's repair of a wheel of another CPU architecture (a cross build's repair).

auditwheel's command line offers the ``--plat`` choices of the machine it runs on, so on x86_64
it refuses ``manylinux_2_28_aarch64`` before looking at the wheel; its library functions take
the architecture as an argument. This runs the steps of ``auditwheel repair --only-plat`` through
those public functions (``analyze_wheel_abi``, ``repair_wheel``) with the wheel's architecture
given, nothing patched: the same ABI analysis, the same refusals (too-recent symbols, black-listed
symbols, ISA extensions), the same exclusions, grafting and tags. Debian's cross libc folder
(``/usr/<triplet>/lib``) is searched first for the target's libraries; auditwheel only considers
libraries of the wheel's architecture.
"""

from __future__ import annotations

import argparse
import sys
import zlib
from pathlib import Path

from release.hints import a_or_an
from release.resources.cpus import cpus


def repair(arch: str, plat: str, excludes: list[str], out_dir: Path, wheel: Path) -> int:
    from auditwheel.architecture import Architecture
    from auditwheel.libc import Libc
    from auditwheel.patcher import ElfPatcher
    from auditwheel.repair import repair_wheel
    from auditwheel.wheel_abi import analyze_wheel_abi

    suffix = f"_{arch}"
    if not plat.endswith(suffix):
        print(f"error: --plat {plat} is not {a_or_an(arch)} platform", file=sys.stderr)
        return 2
    base = plat[: -len(suffix)]
    libc = next((lc for lc in Libc if base.startswith(lc.tag_prefix)), None)
    target_lib = Path(f"/usr/{arch}-linux-gnu/lib")
    abi = analyze_wheel_abi(
        libc,
        Architecture(arch),
        wheel,
        frozenset(excludes),
        disable_isa_ext_check=False,
        allow_graft=True,
        requested_policy_base_name=base,
        args_ldpaths=str(target_lib) if target_lib.is_dir() else None,
    )
    requested = abi.policies.get_policy_by_name(plat)
    for limit, why in (
        (abi.sym_policy, "of the presence of too-recent versioned symbols"),
        (abi.ucs_policy, "it was compiled against a UCS2 build of Python"),
        (abi.blacklist_policy, "it depends on black-listed symbols"),
        (abi.machine_policy, "it depends on unsupported ISA extensions"),
    ):
        if requested > limit:
            print(f'error: cannot repair "{wheel}" to "{plat}" ABI because {why}', file=sys.stderr)
            return 1
    out_dir.mkdir(parents=True, exist_ok=True)
    out = repair_wheel(
        abi,
        wheel,
        abis=[requested.name, *requested.aliases],
        lib_sdir=".libs",
        out_dir=out_dir,
        update_tags=True,
        patcher=ElfPatcher.get_patcher("patchelf", requested.name),
        strip=False,
        zip_compression_level=zlib.Z_DEFAULT_COMPRESSION,
    )
    if out is None:  # nothing to repair: auditwheel leaves such a wheel where it is
        print(f"error: auditwheel found nothing to repair in {wheel}", file=sys.stderr)
        return 1
    print(f"Fixed-up wheel written to {out}")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m release.wheelbuild.repair.auditwheel_as", description=__doc__
    )
    parser.add_argument("arch", choices=cpus().manylinux)
    parser.add_argument("command", choices=("repair",))
    parser.add_argument("--only-plat", action="store_true", required=True)
    parser.add_argument("--plat", required=True)
    parser.add_argument("--exclude", action="append", default=[])
    parser.add_argument("-w", dest="out_dir", type=Path, required=True)
    parser.add_argument("wheel", type=Path)
    args = parser.parse_args(argv)
    return repair(args.arch, args.plat, args.exclude, args.out_dir.absolute(), args.wheel)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
