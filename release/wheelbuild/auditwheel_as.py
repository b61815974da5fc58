"""``python -m release.wheelbuild.auditwheel_as ARCH repair ...``: auditwheel for a wheel of another
CPU architecture (a cross build's repair).

auditwheel reads the wheel's ELF files whatever their architecture, but chooses its table of
policies (the ``--plat`` choices) by ``platform.machine()`` of the machine it runs on, so on
x86_64 it refuses ``--plat manylinux_2_28_aarch64`` before looking at the wheel. This runs
auditwheel's own command line with ``platform.machine()`` answering ``ARCH``; everything else
(the ABI analysis, the exclusions, the grafting, the tags) is auditwheel's. The library search
paths of the target (``/usr/<triplet>/lib``, where Debian's cross libc lies) come first through
``AUDITWHEEL_LD_LIBRARY_PATH``; auditwheel only considers libraries of the wheel's architecture.
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

ARCHS = ("x86_64", "aarch64")


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ARCHS:
        print(
            f"usage: python -m release.wheelbuild.auditwheel_as {{{','.join(ARCHS)}}} AUDITWHEEL-ARGS...",
            file=sys.stderr,
        )
        return 2
    arch, rest = argv[0], argv[1:]
    platform.machine = lambda: arch
    target_lib = f"/usr/{arch}-linux-gnu/lib"
    if Path(target_lib).is_dir():
        extra = os.environ.get("AUDITWHEEL_LD_LIBRARY_PATH", "")
        os.environ["AUDITWHEEL_LD_LIBRARY_PATH"] = ":".join(p for p in (target_lib, extra) if p)
    from auditwheel.main import main as auditwheel_main

    sys.argv = ["auditwheel", *rest]
    return int(auditwheel_main() or 0)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
