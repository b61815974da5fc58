"""Can this machine run another CPU's programs? Natively, or through a ``binfmt_misc`` entry
that hands them to qemu-user (``qemu-aarch64``, as Debian's ``qemu-user-static`` and
``binfmt-support`` register it). If not, the exact commands that make it so.

:func:`parse_entry`, :func:`decide` and :func:`enable_commands` are pure; :func:`read_state`
reads ``/proc/sys/fs/binfmt_misc``; :func:`require` raises with the commands when it cannot.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from release.core.errors import ToolError
from release.resources.cpus import arch as cpu_arch
from release.resources.cpus import cpus, host_arch, is_foreign

BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")
# the binfmt_misc entry's name is its qemu-user program's (cpus.toml's qemu), from these Debian packages
QEMU_PACKAGES = ("qemu-user-static", "binfmt-support")


def _qemu(target: str) -> str | None:
    """The qemu-user program (and binfmt_misc entry) that runs ``target``'s programs; None: not emulated."""
    cpu = cpu_arch(target)
    return cpu.qemu if cpu is not None else None


@dataclass(frozen=True)
class BinfmtEntry:
    """One ``binfmt_misc`` registration, as the kernel shows it."""

    name: str
    enabled: bool
    interpreter: str
    flags: str  # "PF": preserve argv[0], interpreter opened at registration (works anywhere)


@dataclass(frozen=True)
class BinfmtState:
    """What the kernel says about ``binfmt_misc`` for one target CPU."""

    mounted: bool  # /proc/sys/fs/binfmt_misc holds the kernel's files (its ``status``)
    globally_enabled: bool  # its ``status`` says enabled
    entry: BinfmtEntry | None  # the target's registration, when there is one
    interpreter_exists: bool  # the entry's interpreter file is there (flag F keeps it open anyway)


@dataclass(frozen=True)
class Capability:
    """Whether programs of ``target`` run here, how, and (when not) why and what to run."""

    target: str
    host: str
    runs: bool
    how: str  # "native" | "emulated" | "no"
    reason: str  # one line: how it runs, or why it does not
    fix: tuple[str, ...] = ()  # shell commands (as root) that make it run

    @property
    def emulated(self) -> bool:
        return self.how == "emulated"


def parse_entry(name: str, text: str) -> BinfmtEntry:
    """A ``/proc/sys/fs/binfmt_misc/<name>`` file (pure): ``enabled``, ``interpreter ...``, ``flags: ...``."""
    lines = [line.strip() for line in text.splitlines()]
    interpreter = next((ln.split(None, 1)[1] for ln in lines if ln.startswith("interpreter ")), "")
    flags = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("flags:")), "")
    return BinfmtEntry(name, bool(lines) and lines[0] == "enabled", interpreter, flags)


def read_state(target: str, binfmt_dir: Path = BINFMT_DIR) -> BinfmtState:
    """The kernel's ``binfmt_misc`` state for ``target`` (reads files only)."""
    try:
        status = (binfmt_dir / "status").read_text(encoding="utf-8").strip()
    except OSError:
        return BinfmtState(False, False, None, False)
    name = _qemu(target)
    entry = None
    if name is not None:
        try:
            entry = parse_entry(name, (binfmt_dir / name).read_text(encoding="utf-8"))
        except OSError:
            entry = None
    exists = entry is not None and bool(entry.interpreter) and Path(entry.interpreter).is_file()
    return BinfmtState(True, status == "enabled", entry, exists)


def enable_commands(target: str, state: BinfmtState) -> tuple[str, ...]:
    """The commands (as root) that let this machine run ``target`` programs, given ``state`` (pure).

    Installing the packages registers the entry; the mount is needed where ``binfmt_misc`` is
    not mounted (a container); ``update-binfmts --enable`` turns a disabled entry back on."""
    name = _qemu(target) or f"qemu-{target}"
    commands: list[str] = []
    if state.entry is None or not state.interpreter_exists:
        commands += ["apt-get update", f"apt-get install -y {' '.join(QEMU_PACKAGES)}"]
    if not state.mounted:
        commands.append(f"mount -t binfmt_misc binfmt_misc {BINFMT_DIR}")
    if not state.globally_enabled and state.mounted:
        commands.append(f"echo 1 > {BINFMT_DIR}/status")
    if state.entry is None or not state.entry.enabled or not state.mounted:
        commands.append(f"update-binfmts --enable {name}")
    return tuple(commands)


def decide(target: str, host: str, state: BinfmtState) -> Capability:
    """Whether ``target`` programs run on a ``host`` machine whose kernel is in ``state`` (pure)."""
    if not is_foreign(target, host):
        return Capability(target, host, True, "native", f"{target} is this machine's own CPU")
    name = _qemu(target)
    if name is None:
        known = sorted(c.name for c in cpus().by_name.values() if c.qemu)
        return Capability(target, host, False, "no", f"no emulation of {target} is known here (only {known})")
    fix = enable_commands(target, state)
    if not state.mounted:
        why = f"binfmt_misc is not mounted on {BINFMT_DIR}"
    elif not state.globally_enabled:
        why = f"binfmt_misc is disabled ({BINFMT_DIR}/status)"
    elif state.entry is None:
        why = f"no {name} entry in {BINFMT_DIR} (qemu-user-static is not installed or not registered)"
    elif not state.entry.enabled:
        why = f"the {name} entry in {BINFMT_DIR} is disabled"
    elif not state.interpreter_exists and "F" not in state.entry.flags:
        why = f"the {name} entry's interpreter {state.entry.interpreter} is missing"
    else:
        how = f"{target} programs run under qemu-user ({name}: {state.entry.interpreter}, flags {state.entry.flags or '-'})"
        return Capability(target, host, True, "emulated", how)
    return Capability(target, host, False, "no", f"{host} cannot run {target} programs: {why}", fix)


def capability(target: str, binfmt_dir: Path = BINFMT_DIR) -> Capability:
    """:func:`decide` for this machine."""
    host = host_arch()
    state = (
        read_state(target, binfmt_dir) if is_foreign(target, host) else BinfmtState(True, True, None, False)
    )
    return decide(target, host, state)


def require(target: str, binfmt_dir: Path = BINFMT_DIR) -> Capability:
    """:func:`capability`, or ToolError naming why and the commands that fix it."""
    cap = capability(target, binfmt_dir=binfmt_dir)
    if not cap.runs:
        steps = "; ".join(f"`{c}`" for c in cap.fix)
        raise ToolError(f"{cap.reason}; to run them, as root: {steps}" if steps else cap.reason)
    return cap
