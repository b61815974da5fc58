"""How long publishing waits for an index: whole-request and whole-upload deadlines, per target.

A per-read timeout does not bound a request: an index that sends one byte every 20 s never
trips a 60 s read timeout. So every index request has one deadline for its whole life
(connect, send, headers, body), and every upload one deadline for the whole twine call, after
which twine is killed with its process group. A twine child also dies with its parent
(``PR_SET_PDEATHSIG``, set by a tiny launcher before it becomes twine): a ``kill -9`` of the
publisher leaves no upload running on its own.

Defaults: 60 s per index request (10 s of it to connect); per upload 120 s plus 1 s per MiB
(a 2 GiB wheel gets about 37 minutes), and up to 60 s waiting for a file to appear when an
index lags behind its uploads. Override them per index, first match wins:
``WHEELWRIGHT_<VARIANT>_REQUEST_DEADLINE_S`` / ``_UPLOAD_DEADLINE_S`` (``WHEELWRIGHT_CU130_...``),
then ``WHEELWRIGHT_REQUEST_DEADLINE_S`` / ``WHEELWRIGHT_UPLOAD_DEADLINE_S``.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from release.core.durations import seconds

MIB = 1024 * 1024


@dataclass(frozen=True)
class Deadlines:
    """Seconds publishing gives one index. ``upload_s`` None: ``upload_base_s`` + size / rate."""

    request_s: float = 60.0
    connect_s: float = 10.0
    upload_s: float | None = None
    upload_base_s: float = 120.0
    upload_min_mib_per_s: float = 1.0
    read_back_s: float = 60.0  # how long a file missing after its upload is waited for

    def for_upload(self, size: int) -> float:
        if self.upload_s is not None:
            return self.upload_s
        return self.upload_base_s + size / MIB / self.upload_min_mib_per_s

    @property
    def timeout(self) -> tuple[float, float]:
        """(connect, whole request) for :mod:`release.publish.index.client`."""
        return (min(self.connect_s, self.request_s), self.request_s)


def env_names(variant: str) -> dict[str, tuple[str, str]]:
    """field -> (the variant's variable, the global one)."""
    stem = re.sub(r"[^A-Z0-9]", "_", variant.upper())
    return {
        field: (f"WHEELWRIGHT_{stem}_{key}_DEADLINE_S", f"WHEELWRIGHT_{key}_DEADLINE_S")
        for field, key in (("request_s", "REQUEST"), ("upload_s", "UPLOAD"))
    }


def deadlines_for(variant: str, env: Mapping[str, str], base: Deadlines | None = None) -> Deadlines:
    """The deadlines for ``variant``'s index: ``base`` (default :class:`Deadlines`) with the
    environment's overrides. InputError (exit 2) naming the variable for a value that is not a
    positive, finite number of seconds (:func:`release.core.durations.seconds`)."""
    out = base or Deadlines()
    for field, names in env_names(variant).items():
        for name in names:
            raw = env.get(name, "").strip()
            if not raw:
                continue
            out = replace(out, **{field: seconds(raw, f"{name}={raw!r}", zero_ok=False)})
            break
    return out


class Clock:
    """One deadline: ``Clock(seconds)``; :meth:`left` is what remains (never below 0)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.start = time.monotonic()

    def left(self) -> float:
        return max(0.0, self.seconds - (time.monotonic() - self.start))

    @property
    def expired(self) -> bool:
        return self.left() <= 0.0

    def elapsed(self) -> float:
        return time.monotonic() - self.start


# Becomes the command in argv[2:] after asking the kernel to SIGKILL it when its parent dies
# (PR_SET_PDEATHSIG survives exec). If the parent died before that, it exits at once.
_LAUNCHER = r"""
import ctypes, os, signal, sys
parent = int(sys.argv[1])
if sys.platform.startswith("linux"):
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(1, int(signal.SIGKILL), 0, 0, 0) != 0:  # PR_SET_PDEATHSIG
        sys.exit("cannot set PR_SET_PDEATHSIG: errno %d" % ctypes.get_errno())
if os.getppid() != parent:
    sys.exit("the publisher died before its upload started")
os.execv(sys.argv[2], sys.argv[2:])
"""


def dies_with_parent(argv: Sequence[str], parent_pid: int, *, python: str = sys.executable) -> list[str]:
    """``argv`` (an absolute program first) run so that it is killed when ``parent_pid`` dies."""
    return [python, "-c", _LAUNCHER, str(parent_pid), *argv]
