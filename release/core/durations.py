"""Seconds given by a person (a flag, an environment variable): one parser, one message."""

from __future__ import annotations

import math

from release.core.errors import InputError


def seconds(raw: str, what: str, *, zero_ok: bool) -> float:
    """``raw`` as a finite number of seconds, positive (or 0 with ``zero_ok``); InputError (exit 2)
    naming ``what`` (``--probe-timeout 0``, ``WHEELWRIGHT_LOCK_WAIT_S='x'``) otherwise."""
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if zero_ok and not 0 <= value < math.inf:
        raise InputError(f"{what}: give a number of seconds, 0 or more")
    if not zero_ok and not 0 < value < math.inf:
        raise InputError(f"{what}: give a positive, finite number of seconds")
    return value
