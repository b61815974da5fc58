"""Is a process still the one it was? Its pid, and its start time and command line from /proc.

A pid alone says little: a process that died gives its pid back, and another may get it.
:func:`start_ticks` is when a process started (``/proc/<pid>/stat`` field 22, clock ticks since
boot): the same pid with another start time is another process. :func:`same_process` is the
check every sweep of something a run left behind uses (a staging folder, a lease on the local
index): alive, and started when the run that left it did. :func:`flock_holders` asks the kernel
(``/proc/locks``) which process holds an ``flock`` on a file or folder, so a lock's holder can be
named even after its lock file was deleted.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

PROC = Path("/proc")


def start_ticks(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot); None when it is not running or /proc says nothing."""
    try:
        text = (PROC / str(pid) / "stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses; it ends at the last ')'
    fields = text[text.rfind(")") + 2 :].split()
    try:
        return int(fields[19])  # field 22 of the whole line; 3 (state) is fields[0]
    except (IndexError, ValueError):
        return None


def command_of(pid: int) -> str | None:
    """``pid``'s command line, its arguments joined by spaces; None when it cannot be read."""
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    words = [w.decode("utf-8", "replace") for w in raw.split(b"\0") if w]
    return " ".join(words) if words else None


def pid_alive(pid: int) -> bool:
    """True when a process with this pid exists (this user's or another's)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def same_process(pid: int, ticks: int | None) -> bool:
    """True when ``pid`` is alive and, where its start time was recorded and /proc can be read,
    started then. Without a recorded start time (or /proc) a live pid counts as the same: a sweep
    keeps what it cannot prove dead."""
    if not pid_alive(pid):
        return False
    if ticks is None:
        return True
    now = start_ticks(pid)
    return now is None or now == ticks


def flock_holders(path: Path) -> list[int]:
    """The pids the kernel says hold an ``flock`` on ``path`` (``/proc/locks``); [] when none or unknown."""
    try:
        st = path.stat()
        text = (PROC / "locks").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids: list[int] = []
    for line in text.splitlines():
        parts = line.split()
        if "->" in parts:  # a waiter ("1: -> FLOCK ..."), not a holder
            continue
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] == want and parts[4].isdigit():
            pid = int(parts[4])
            if pid > 0 and pid not in pids:
                pids.append(pid)
    return pids


def started_utc(ticks: int) -> str | None:
    """The UTC time (ISO 8601) a process with this start time started; None without /proc/stat."""
    try:
        text = (PROC / "stat").read_text(encoding="utf-8")
        boot = next(int(line.split()[1]) for line in text.splitlines() if line.startswith("btime "))
        hz = os.sysconf("SC_CLK_TCK")
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(boot + ticks / hz))
