"""Debian's apt, kept private: this machine's apt sources read (both formats), the Debian mirror
they name, and apt run with its own sources list, lists, cache, status and logs, so packages of
any suite and architecture are resolved and downloaded with no change to the system.

Shared by ``scripts/fetch_cuda12_debian.py`` (trixie's CUDA 12.4 toolkit) and
:mod:`release.emulate.sysroot` (arm64 CPython sysroots). The mirror is always the one this
machine's own apt sources name: never a host name written here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from release.core.errors import InputError, StepFailed
from release.core.proc import Result, run

COMPONENTS = ("main", "contrib", "non-free", "non-free-firmware")
APT_TIMEOUT_S = 900.0  # an update or a download of a few hundred MB
DEBIAN_SUITES = frozenset(
    {
        "buster",
        "bullseye",
        "bookworm",
        "trixie",
        "forky",
        "duke",
        "sid",
        "oldoldstable",
        "oldstable",
        "stable",
        "testing",
        "unstable",
    }
)

Log = Callable[[str], None]


def _quiet(message: str) -> None:
    del message


class NoDebianSource(InputError):
    """This machine's apt sources name no Debian archive to take the mirror from."""


class PackageMissing(StepFailed):
    """A package of the set is not in the mirror's suite (or has the wrong version)."""


# --------------------------------------------------------------------------- apt sources


@dataclass(frozen=True)
class AptSource:
    """One `deb` entry of an apt sources file (one URI, one suite)."""

    uri: str
    suite: str
    components: tuple[str, ...]
    signed_by: str | None  # a keyring file; None when absent or an inline key
    origin: str  # the file it came from


def parse_one_line_sources(text: str, origin: str) -> list[AptSource]:
    """Parse the one-line format (`deb [opts] URI suite comp...`); `deb-src` is skipped."""
    found: list[AptSource] = []
    pattern = re.compile(r"^(deb|deb-src)\s+(?:\[([^\]]*)\]\s*)?(\S+)\s+(\S+)\s*(.*)$")
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        m = pattern.match(line)
        if not m or m[1] != "deb":
            continue
        options = dict(
            opt.split("=", 1) for opt in (m[2] or "").split() if "=" in opt
        )  # e.g. signed-by=/usr/share/keyrings/x.gpg arch=amd64
        signed_by = options.get("signed-by")
        found.append(
            AptSource(
                uri=m[3].rstrip("/"),
                suite=m[4],
                components=tuple(m[5].split()),
                signed_by=signed_by if signed_by and signed_by.startswith("/") else None,
                origin=origin,
            )
        )
    return found


def _deb822_paragraphs(text: str) -> Iterator[dict[str, str]]:
    fields: dict[str, str] = {}
    key: str | None = None
    for raw in [*text.splitlines(), ""]:
        if raw.startswith("#"):
            continue
        if not raw.strip():
            if fields:
                yield fields
            fields, key = {}, None
        elif raw[0] in " \t":
            if key is not None:
                fields[key] += "\n" + raw.strip()
        elif ":" in raw:
            name, value = raw.split(":", 1)
            key = name.strip().lower()
            fields[key] = value.strip()


def parse_deb822_sources(text: str, origin: str) -> list[AptSource]:
    """Parse the deb822 format (`*.sources`): one AptSource per (URI, suite) of a `deb` stanza."""
    found: list[AptSource] = []
    for fields in _deb822_paragraphs(text):
        if fields.get("enabled", "yes").strip().lower() == "no":
            continue
        if "deb" not in fields.get("types", "").split():
            continue
        signed_by = fields.get("signed-by", "").strip()
        keyring = signed_by if signed_by.startswith("/") and "\n" not in signed_by else None
        components = tuple(fields.get("components", "").split())
        for uri in fields.get("uris", "").split():
            for suite in fields.get("suites", "").split():
                found.append(AptSource(uri.rstrip("/"), suite, components, keyring, origin))
    return found


def read_apt_sources(etc_apt: Path = Path("/etc/apt")) -> list[AptSource]:
    """All `deb` entries of the machine's apt sources, in apt's reading order."""
    sources: list[AptSource] = []
    main_list = etc_apt / "sources.list"
    if main_list.is_file():
        sources += parse_one_line_sources(main_list.read_text(errors="replace"), str(main_list))
    parts = etc_apt / "sources.list.d"
    if parts.is_dir():
        for path in sorted(parts.iterdir()):
            if path.suffix == ".list" and path.is_file():
                sources += parse_one_line_sources(path.read_text(errors="replace"), str(path))
            elif path.suffix == ".sources" and path.is_file():
                sources += parse_deb822_sources(path.read_text(errors="replace"), str(path))
    return sources


def _is_debian_main(source: AptSource) -> bool:
    base, _, pocket = source.suite.partition("-")
    return (
        base in DEBIAN_SUITES
        and pocket != "security"
        and "main" in source.components
        and not source.uri.startswith("cdrom:")
        and not source.uri.rstrip("/").endswith("-security")
    )


def debian_mirror(sources: Sequence[AptSource]) -> AptSource:
    """The entry this machine uses for Debian main: a Debian suite (not -security) with `main`.

    A plain release suite (`bookworm`) wins over a pocket of it (`bookworm-updates`); among
    equals the first in apt's reading order wins. Raises NoDebianSource naming what was read.
    """
    candidates = [s for s in sources if _is_debian_main(s)]
    if not candidates:
        read = sorted({s.origin for s in sources}) or ["no sources file with a `deb` entry"]
        raise NoDebianSource(
            "no Debian archive serving `main` in this machine's apt sources "
            f"(read: {', '.join(read)}); pass --mirror URI to name one"
        )
    candidates.sort(key=lambda s: "-" in s.suite)  # stable: keeps apt's order among equals
    return candidates[0]


def find_debian_mirror(etc_apt: Path = Path("/etc/apt")) -> AptSource:
    """The Debian main entry of this machine's apt sources (see debian_mirror)."""
    return debian_mirror(read_apt_sources(etc_apt))


# --------------------------------------------------------------------------- private apt


@dataclass(frozen=True)
class DebFile:
    """One package file as `apt-get --print-uris download` names it."""

    name: str
    version: str
    filename: str
    size: int
    sha256: str
    uri: str


class PrivateApt:
    """apt with its own sources, lists, cache, status and logs under `root`, for one `suite`
    of the `source`'s archive and one architecture (`arch`: ``amd64``, ``arm64``).

    It still reads the machine's apt.conf.d (proxies, authentication, Check-Valid-Until)
    and trusted keys; it writes only under `root`. Hooks the machine runs after an
    update (PackageKit and the like) are cleared.
    """

    def __init__(
        self,
        root: Path,
        source: AptSource,
        *,
        suite: str,
        arch: str,
        components: Sequence[str] = COMPONENTS,
        wrapper: Sequence[str] = (),
        log: Log = _quiet,
        timeout: float = APT_TIMEOUT_S,
    ) -> None:
        self.root = root
        self.source = source
        self.suite = suite
        self.components = tuple(components)
        self.arch = arch
        self.timeout = timeout
        self.wrapper = tuple(wrapper)  # e.g. ("strace", "-f", ...) to watch what apt touches
        self.log = log
        self.archives = root / "archives"
        self._conf = root / "apt.conf"
        self._write_layout()

    def _write_layout(self) -> None:
        r = self.root
        for sub in (
            "etc/sources.list.d",
            "etc/preferences.d",
            "etc/apt.conf.d",
            "lists/partial",
            "cache/archives/partial",
            "state",
            "log",
            "tmp",
            "archives",
        ):
            (r / sub).mkdir(parents=True, exist_ok=True)
        (r / "state/status").write_text("")
        keyring = self.source.signed_by
        default_keyring = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
        if keyring is None and default_keyring.is_file():
            keyring = str(default_keyring)
        options = f"[signed-by={keyring}] " if keyring else ""
        (r / "etc/sources.list").write_text(
            f"# private: derived from {self.source.origin} ({self.source.uri})\n"
            f"deb {options}{self.source.uri} {self.suite} {' '.join(self.components)}\n"
        )
        lines = [
            "#clear APT::Update::Pre-Invoke;",
            "#clear APT::Update::Post-Invoke;",
            "#clear APT::Update::Post-Invoke-Success;",
            "#clear DPkg::Pre-Invoke;",
            "#clear DPkg::Post-Invoke;",
            "#clear APT::Architectures;",
            f'APT::Architecture "{self.arch}";',
            f'APT::Architectures {{ "{self.arch}"; }};',
            'Acquire::Languages "none";',
            'Dir::Cache::pkgcache "pkgcache.bin";',
            'Dir::Cache::srcpkgcache "srcpkgcache.bin";',
        ]
        if os.geteuid() == 0:
            # root would hand downloads to the `_apt` user, who cannot write here.
            lines.append('APT::Sandbox::User "root";')
        self._conf.write_text("\n".join(lines) + "\n")
        # Index targets other than Packages (DEP-11, Contents, ...) that the machine's
        # configuration enables are not needed: turn each off by name.
        dump = self._run("apt-config", "dump").stdout
        targets = re.findall(r"^Acquire::IndexTargets::deb::([^:\s]+)::MetaKey ", dump, re.M)
        extra = sorted(set(targets) - {"Packages"})
        if extra:
            with self._conf.open("a") as conf:
                for target in extra:
                    conf.write(f'Acquire::IndexTargets::deb::{target}::DefaultEnabled "false";\n')

    def options(self) -> list[str]:
        """The command-line options that make apt private (after `-c` with the rest)."""
        r = self.root
        settings = {
            "Dir::Etc::SourceList": r / "etc/sources.list",
            "Dir::Etc::SourceParts": r / "etc/sources.list.d",
            "Dir::Etc::Preferences": r / "etc/preferences",
            "Dir::Etc::PreferencesParts": r / "etc/preferences.d",
            "Dir::State": r / "state",
            "Dir::State::Lists": r / "lists",
            "Dir::State::status": r / "state/status",
            "Dir::State::extended_states": r / "state/extended_states",
            "Dir::Cache": r / "cache",
            "Dir::Cache::archives": r / "cache/archives",
            "Dir::Log": r / "log",
        }
        argv = ["-c", str(self._conf)]
        for key, value in settings.items():
            argv += ["-o", f"{key}={value}"]
        return argv

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(LC_ALL="C", LANGUAGE="C", TMPDIR=str(self.root / "tmp"))
        env.pop("APT_CONFIG", None)
        return env

    def _run(self, tool: str, *args: str, cwd: Path | None = None, check: bool = True) -> Result:
        argv = [*self.wrapper, tool, *self.options(), *args]
        step = f"apt ({self.suite}, {self.arch}): {tool} {' '.join(args[:3])}"
        return run(argv, env=self.env(), cwd=cwd or self.root, check=check, timeout=self.timeout, step=step)

    def update(self) -> None:
        self.log(f"apt-get update: {self.source.uri} {self.suite} {' '.join(self.components)}")
        res = self._run("apt-get", "-q", "update", check=False)
        output = (res.stderr + res.stdout).splitlines()
        errors = [ln for ln in output if ln.startswith(("E:", "W:"))]
        if res.returncode != 0 or any(ln.startswith("E:") for ln in errors):
            hint = ""
            if re.search(r"NO_PUBKEY|EXPKEYSIG|KEYEXPIRED", res.stderr):
                hint = (
                    f"\nthe archive keyring here has no {self.suite} key: "
                    "upgrade debian-archive-keyring (or pass --mirror with a trusted URI)"
                )
            raise StepFailed(
                f"apt-get update of {self.source.uri} {self.suite} failed "
                f"(exit {res.returncode}):\n" + "\n".join(errors[-15:]) + hint
            )

    def resolve(self, packages: Sequence[str]) -> list[DebFile]:
        """Name, version, file, size and hash of each package's candidate; none downloaded."""
        res = self._run("apt-get", "-q", "--print-uris", "download", *packages, check=False)
        missing = re.findall(r"Unable to locate package (\S+)", res.stderr)
        missing += re.findall(r"Can't select candidate version from package (\S+)", res.stderr)
        missing += re.findall(r"Package '?(\S+?)'? has no installation candidate", res.stderr)
        if missing or res.returncode != 0:
            what = ", ".join(sorted(set(missing))) or "(see apt's message)"
            raise PackageMissing(
                f"not in {self.source.uri} {self.suite} ({' '.join(self.components)}) for {self.arch}: "
                f"{what}\n{res.stderr.strip()[-2000:]}"
            )
        debs: list[DebFile] = []
        line_re = re.compile(r"^'(\S+)' (\S+) (\d+) (?:SHA256:)?([0-9a-f]{64})\b", re.M)
        for m in line_re.finditer(res.stdout):
            name, version, _arch = m[2].removesuffix(".deb").split("_")
            debs.append(DebFile(name, unquote(version), m[2], int(m[3]), m[4], m[1]))
        got = {d.name for d in debs}
        if got != set(packages):
            raise PackageMissing(
                f"apt named files for {sorted(got)}, expected {sorted(packages)}:\n{res.stdout}"
            )
        return debs

    def download(self, packages: Sequence[str]) -> None:
        self._run("apt-get", "-q", "download", *packages, cwd=self.archives)

    def candidates(self, packages: Sequence[str]) -> dict[str, str | None]:
        """Each package's candidate version in this suite and architecture, None where it has none."""
        res = self._run("apt-cache", "policy", *packages, check=False)
        found: dict[str, str | None] = dict.fromkeys(packages)
        current: str | None = None
        for line in res.stdout.splitlines():
            if line and not line[0].isspace() and line.endswith(":"):
                current = line[:-1].rsplit(":", 1)[0] if line[:-1].endswith(f":{self.arch}") else line[:-1]
            elif current in found and line.strip().startswith("Candidate:"):
                value = line.split(":", 1)[1].strip()
                found[current] = None if value == "(none)" else value
        return found
