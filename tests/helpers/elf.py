"""Real shared libraries and wheels for the audit's tests: gcc links each library on the spot.

:class:`Gcc` builds a library with the SONAME, DT_NEEDED entries (linked against stubs that are
never shipped) and RUNPATH asked for; :func:`write_wheel` zips files into a wheel whose METADATA,
WHEEL and RECORD are right; :func:`sdk_finding` audits a wheel shipping a C++ SDK (its C++ consumer
finding); :func:`facts` reads what two builds of one row must agree on.
"""

from __future__ import annotations

import base64
import dataclasses
import email.parser
import hashlib
import re
import stat
import subprocess
import zipfile
from pathlib import Path

from release.audit.model import Finding
from release.binary.elf import read_elf
from release.binary.fatbin import all_entries, has_device_code

TAG = "manylinux_2_28_x86_64"


class Gcc:
    """Real shared libraries, linked by gcc with the SONAME, DT_NEEDED and RUNPATH asked for."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.stubs = tmp / "stubs"  # what DT_NEEDED entries are linked against (never shipped)
        self.stubs.mkdir(exist_ok=True)

    def so(
        self,
        soname: str,
        *,
        needed: tuple[str, ...] = (),
        runpath: tuple[str, ...] = (),
        body: str = "",
    ) -> bytes:
        """The bytes of a library answering to ``soname``; ``body`` makes two builds differ."""
        index = len(list(self.tmp.glob("src*.c")))
        src = self.tmp / f"src{index}.c"
        symbol = re.sub(r"\W", "_", soname)
        src.write_text(f'int {symbol}(void) {{ return {len(body)}; }}\nconst char *build = "{body}";\n')
        out = self.tmp / f"out{index}.so"
        argv = ["gcc", "-shared", "-fPIC", "-o", str(out), str(src), f"-Wl,-soname,{soname}"]
        for name in needed:
            stub = self.stubs / name
            if not stub.exists():
                subprocess.run(
                    [
                        "gcc",
                        "-shared",
                        "-fPIC",
                        "-o",
                        str(stub),
                        "-x",
                        "c",
                        "/dev/null",
                        f"-Wl,-soname,{name}",
                    ],
                    check=True,
                    capture_output=True,
                    timeout=120,
                )
            argv += [f"-L{self.stubs}", "-Wl,--no-as-needed", f"-l:{name}"]
        if runpath:
            argv += ["-Wl,--enable-new-dtags", f"-Wl,-rpath,{':'.join(runpath)}"]
        subprocess.run(argv, check=True, capture_output=True, timeout=120)
        return out.read_bytes()


def gcc_so(
    tmp: Path, soname: str, *, needed: tuple[str, ...] = (), runpath: tuple[str, ...] = (), body: str = ""
) -> bytes:
    return Gcc(tmp).so(soname, needed=needed, runpath=runpath, body=body)


def b64_sha256(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def write_wheel(
    folder: Path, name: str, files: dict[str, bytes], *, tag: str = TAG, requires: tuple[str, ...] = ()
) -> Path:
    """A wheel of ``name`` 1.0 holding ``files``, whose METADATA, WHEEL and RECORD are right."""
    dist = re.sub(r"[-_.]+", "_", name)
    info = f"{dist}-1.0.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    every = {
        **files,
        f"{info}/METADATA": metadata.encode(),
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: py3-none-{tag}\n".encode(),
    }
    record = [f"{n},sha256={b64_sha256(d)},{len(d)}" for n, d in every.items()] + [f"{info}/RECORD,,"]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{dist}-1.0-py3-none-{tag}.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for member, data in every.items():
            zf.writestr(member, data)
        zf.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return path


def sdk_finding(tmp: Path, headers: dict[str, str], lib: str, *, cxx: bool = False) -> Finding:
    """The audit's ``cpp_consumer`` finding for a wheel shipping ``headers`` in fxsdk/include and ``lib``
    built into fxsdk/lib/libfx.so (by g++ when ``cxx``: its functions exported by their mangled names)."""
    from release.audit.claim import claim_expectation
    from release.audit.cpp import early as cpp_early
    from release.audit.reading.archive import open_wheel

    src = tmp / ("fx.cpp" if cxx else "fx.c")
    src.write_text(lib, encoding="utf-8")
    compiler = "g++" if cxx else "gcc"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", tmp / "libfx.so", src], check=True, timeout=120)
    wheel = tmp / "fxsdk-1.0-py3-none-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        members = {f"fxsdk/include/{name}": text.encode() for name, text in headers.items()}
        members |= {
            "fxsdk/lib/libfx.so": (tmp / "libfx.so").read_bytes(),
            "fxsdk-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: fxsdk\nVersion: 1.0\n",
            "fxsdk-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: py3-none-any\n",
        }
        for name, data in members.items():
            info = zipfile.ZipInfo(name, (2024, 1, 1, 0, 0, 0))
            info.external_attr = (stat.S_IFREG | 0o644) << 16
            zf.writestr(info, data)
    expectation = claim_expectation(variant=None, gpu_archs=None, policy=None, runs_on="8.0")
    with open_wheel(wheel) as opened:
        findings, _ = cpp_early.cached_check(opened, expectation, cpp_early.EarlyCpp(False))
    assert len(findings) == 1
    finding: Finding = findings[0]
    return finding


@dataclasses.dataclass
class Facts:
    names: list[str]
    requires: list[str]
    device_code: dict[str, set[str]]
    needed: dict[str, tuple[str, ...]]
    runpath: dict[str, tuple[str, ...]]
    rpath: dict[str, tuple[str, ...]]


def facts(wheel: Path, into: Path) -> Facts:
    """A wheel's files, Requires-Dist, device code per library and each library's NEEDED, RUNPATH and
    RPATH: what a container build and a host build of one row must agree on."""
    with zipfile.ZipFile(wheel) as zf:
        names = sorted(zf.namelist())
        zf.extractall(into)
    meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
    meta = email.parser.Parser().parsestr((into / meta_name).read_text(encoding="utf-8"))
    out = Facts(names, sorted(meta.get_all("Requires-Dist") or []), {}, {}, {}, {})
    for name in names:
        if ".so" in Path(name).name:
            info = read_elf(into / name)
            out.needed[name], out.runpath[name], out.rpath[name] = info.needed, info.runpath, info.rpath
            if has_device_code(into / name):
                out.device_code[name] = {e.name for e in all_entries(into / name)}
    return out
