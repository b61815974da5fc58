"""Sort a wheel's zip entries before anything is read: refused ones become issues, directories
are noted, the rest are the files to read (:mod:`release.audit.reading.archive`); and many issues of one
kind are counted, the first few shown."""

from __future__ import annotations

import stat
import zipfile

from release.audit.model import Member, ZipIssue
from release.audit.reading.identity import member_kind, safe_member_name, unix_mode
from release.audit.reading.limits import first_few
from release.core.errors import InputError

__all__ = ["ISSUES_SHOWN", "aggregate", "classify"]

ISSUES_SHOWN = 10  # issues of one kind listed one by one; the rest are counted in one


def aggregate(issues: list[ZipIssue]) -> list[ZipIssue]:
    """At most :data:`ISSUES_SHOWN` issues of a kind one by one; the rest in one that counts them."""
    by_kind: dict[str, list[ZipIssue]] = {}
    for issue in issues:
        by_kind.setdefault(issue.kind, []).append(issue)
    out: list[ZipIssue] = []
    for kind, group in by_kind.items():
        out += group[:ISSUES_SHOWN]
        rest = group[ISSUES_SHOWN:]
        if rest:
            names = list(dict.fromkeys(i.name for i in rest))
            message = f"{len(rest):,} more {kind} entries, named {first_few(names)}"
            out.append(ZipIssue(rest[0].kind, rest[0].name, message))
    return out


def classify(
    infos: list[zipfile.ZipInfo], wheel: str
) -> tuple[list[ZipIssue], dict[int, Member], list[tuple[int, zipfile.ZipInfo]]]:
    """Sort the entries into refused ones (issues), directories and the files to read."""
    issues: list[ZipIssue] = []
    members: dict[int, Member] = {}
    seen: set[str] = set()
    todo: list[tuple[int, zipfile.ZipInfo]] = []
    disagree: list[tuple[str, str]] = []
    for index, info in enumerate(infos):
        name = info.filename
        kind, why_not = member_kind(info)
        if why_not is not None:
            disagree.append((name, why_not))
            continue
        why = safe_member_name(name)
        if why is not None:
            issues.append(ZipIssue("unsafe-path", name, f"{name!r}: {why}; not extracted"))
            members[index] = Member(name, info.file_size, None, None, "file", problem=why)
            continue
        if name in seen:
            issues.append(
                ZipIssue(
                    "duplicate",
                    name,
                    f"{name!r} appears more than once in the archive; installers disagree on which copy wins",
                )
            )
            members[index] = Member(name, info.file_size, None, None, "file", problem="duplicate name")
            continue
        seen.add(name)
        if kind == "symlink":
            issues.append(
                ZipIssue(
                    "symlink",
                    name,
                    f"{name!r} is a symbolic link; wheels cannot carry links "
                    "(pip writes the link target as a file) and one could point outside site-packages",
                )
            )
            members[index] = Member(name, info.file_size, None, None, "symlink", problem="symlink")
        elif kind == "special":
            mode = stat.filemode(unix_mode(info))
            issues.append(
                ZipIssue("special-file", name, f"{name!r} is a special file (mode {mode}); not extracted")
            )
            members[index] = Member(name, info.file_size, None, None, "special", problem="special file")
        elif kind == "directory":
            members[index] = Member(name, 0, None, None, "directory")
        else:
            todo.append((index, info))
    if disagree:
        name, why = disagree[0]
        more = (
            f" ({len(disagree):,} members: {first_few([n for n, _ in disagree])})"
            if len(disagree) > 1
            else ""
        )
        raise InputError(f"{wheel}: member {name!r}: {why}{more}; the zip's mode bits and names must agree")
    return issues, members, todo
