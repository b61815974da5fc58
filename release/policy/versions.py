"""The spellings a policy may use for a CPython version, a CUDA train and a distribution name.

Strict on purpose: ASCII digits only (``\\d`` would take ``"３.１２"``), anchored with
``\\Z`` (``$`` matches before a trailing newline, so ``"3.12\\n"`` would pass and reach
row ids, session names and the GitHub matrix), and only versions that exist. A version
that is well formed but unknown gets its own message saying where the table lives.
Pure data and functions: no files, no processes.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from release.policy.model import WheelTags

# CPython versions wheelwright can name. Older ones are past end of life and have no
# manylinux_2_28 CUDA wheels; a newer one is added here when CPython releases it.
KNOWN_PYTHONS: tuple[str, ...] = ("3.8", "3.9", "3.10", "3.11", "3.12", "3.13", "3.14", "3.15")

# CUDA toolkit releases (major.minor) that exist. There was no 12.7.
KNOWN_CUDA_TRAINS: tuple[str, ...] = (
    "11.0", "11.1", "11.2", "11.3", "11.4", "11.5", "11.6", "11.7", "11.8",
    "12.0", "12.1", "12.2", "12.3", "12.4", "12.5", "12.6", "12.8", "12.9",
    "13.0", "13.1", "13.2", "13.3", "13.4", "13.5",
)  # fmt: skip

_PYTHON_RE = re.compile(r"3\.(?P<minor>[0-9]{1,2})(?P<ft>t?)\Z", re.ASCII)
_TRAIN_RE = re.compile(r"(?P<major>[0-9]{2})\.(?P<minor>[0-9])\Z", re.ASCII)
# PEP 508 names: ASCII letters and digits, with '.', '_' and '-' inside only.
_NAME_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?\Z", re.ASCII)
_TOKEN_RE = re.compile(r"[\x21-\x7e]+\Z", re.ASCII)  # printable ASCII, no space


def shown(text: str) -> str:
    """``repr`` in ASCII (a fullwidth digit or a newline stays visible), cut to 80 characters."""
    out = ascii(text)
    return out if len(out) <= 80 else out[:77] + "..."


def is_token(text: str) -> bool:
    """Printable ASCII with no whitespace: what an axis value (platform, variant) must be."""
    return _TOKEN_RE.match(text) is not None


def token_problem(text: str) -> str | None:
    """Why ``text`` cannot be an axis value, or None when it can."""
    if is_token(text):
        return None
    if text != text.strip():
        return f"{shown(text)} has leading or trailing whitespace (a newline?); remove it"
    if not text.isascii():
        return f"{shown(text)} has non-ASCII characters; write it in plain ASCII"
    return f"{shown(text)} has spaces or control characters; write it as one plain ASCII word"


def python_problem(text: str) -> str | None:
    """Why ``text`` is not a CPython version wheelwright knows ("3.12", "3.13t"), or None."""
    bad = token_problem(text)
    if bad:
        return f"{bad}; a Python is written like '3.12'"
    m = _PYTHON_RE.match(text)
    if m is None:
        return f"{shown(text)} is not a CPython version like '3.12'"
    base = f"3.{m['minor']}"
    if base not in KNOWN_PYTHONS:
        return (
            f"{shown(text)} is not a CPython version wheelwright knows "
            f"({KNOWN_PYTHONS[0]} to {KNOWN_PYTHONS[-1]}); if CPython {base} has been released, "
            "add it to KNOWN_PYTHONS in release/policy/versions.py"
        )
    return None


def is_free_threaded(text: str) -> bool:
    m = _PYTHON_RE.match(text)
    return m is not None and m["ft"] == "t"


def train_problem(text: str) -> str | None:
    """Why ``text`` is not a CUDA train wheelwright knows ("13.0"), or None."""
    bad = token_problem(text)
    if bad:
        return f"{bad}; a CUDA train is written like '13.0'"
    if _TRAIN_RE.match(text) is None:
        return f"{shown(text)} is not a CUDA version like '13.0'"
    if text not in KNOWN_CUDA_TRAINS:
        return (
            f"{shown(text)} is not a CUDA release wheelwright knows ({', '.join(KNOWN_CUDA_TRAINS)}); "
            "if NVIDIA has released it, add it to KNOWN_CUDA_TRAINS in release/policy/versions.py"
        )
    return None


def version_key(version: str) -> tuple[int, ...]:
    """``3.10`` -> ``(3, 10)``: a valid Python or CUDA version as numbers, to order by (pure)."""
    return tuple(int(x) for x in version.split("."))


def train_variant(version: str) -> str:
    """``13.0`` -> ``cu130``: the variant name a train must use. ``version`` must be valid."""
    m = _TRAIN_RE.match(version)
    if m is None:
        raise ValueError(f"{version!r} is not a CUDA version like '13.0'")
    return f"cu{m['major']}{m['minor']}"


def name_problem(text: str) -> str | None:
    """Why ``text`` is not a valid distribution name (PEP 508), or None."""
    if _NAME_RE.match(text) is None:
        return (
            f"{shown(text)} is not a valid distribution name: ASCII letters and digits, with "
            "'.', '_' or '-' only between them (PEP 508)"
        )
    return None


def python_tag_matches(wheel_tags: WheelTags, python: str, interpreter: str, abi: str) -> bool:
    """Whether a wheel tag's interpreter and ABI serve CPython ``python`` ("3.12") in the form
    ``project.wheel_tags`` names (pure): ``cpython`` cp312-cp312 (the ABI as the interpreter, or
    a debug/other ABI of it: the audit judges those); ``abi3`` cp3X-abi3 with X up to the
    Python's minor; ``py3-none`` py3-none, or py3X-none with X up to it."""
    major, minor = (int(x) for x in python.split(".")[:2])
    if wheel_tags == "cpython":
        return interpreter == f"cp{major}{minor}"
    if wheel_tags == "abi3":
        prefix, want_abi = "cp", "abi3"
    else:  # "py3-none"
        if interpreter == f"py{major}" and abi == "none":
            return True
        prefix, want_abi = "py", "none"
    if abi != want_abi or not interpreter.startswith(f"{prefix}{major}"):
        return False
    rest = interpreter[len(prefix) + 1 :]
    return rest.isascii() and rest.isdigit() and int(rest) <= minor
