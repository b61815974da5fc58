"""Check ``hygiene``: what any wheel is held to, CUDA or not.

* The wheel's identity agrees with itself where pip would install it anyway: WHEEL's ``Tag``
  and ``Build`` lines and the ``.dist-info`` folder's version against the file name
  (:func:`release.audit.reading.identity.read_identity`; what pip refuses is bad input).
* The archive is safe: no name escaping the wheel (absolute, ``..``), no symlink or
  special file, no name twice, no corrupt member (see :mod:`release.audit.reading.archive`).
* RECORD lists every file with its sha256 and size, and every hash matches the bytes
  read in the extraction pass.
* One owner per component, and no CUDA driver, runtime or CUDA package's library copied in
  (:mod:`release.audit.checks.owners`).
* The platform tag is no more than auditwheel's analysis allows for the symbols,
  libraries and instruction sets the ELF files use (CUDA libraries excluded: they
  come from the declared packages), and it is the row's tag. A library auditwheel counts as
  external that the wheel does ship is named with the file that links it and the search path
  that misses it. A wheel with no ELF file but a platform tag (a header-only package tagged per
  platform, as NVIDIA's nvidia-cuda-cccl is) fails a row of the policy and is a note, not a
  failure, for a third-party wheel audited standalone.
* The wheel fits the index's size limit, when one is set.
"""

from __future__ import annotations

import base64
import csv
import io
import posixpath

from packaging.utils import parse_wheel_filename

from release.audit.checks.loader import search_dirs, search_path
from release.audit.checks.owners import grafted_findings, owner_findings
from release.audit.model import AbiReport, Check, Contents, Expectation, Finding, Member, fail, ok
from release.audit.reading.identity import read_identity
from release.audit.reading.limits import first_few
from release.policy.versions import python_tag_matches
from release.runpath import installed_dir, origin_entry

__all__ = [
    "archive_findings",
    "build_path_findings",
    "check",
    "grafted_findings",
    "identity_findings",
    "owner_findings",
    "platform_findings",
    "record_findings",
    "size_findings",
]

CHECK = "hygiene"
_SIGNATURES = ("RECORD.jws", "RECORD.p7s")
_STRONG = ("sha256", "sha384", "sha512")


def _record_digest(algorithm: str, member: Member) -> str | None:
    raw = member.sha256 if algorithm == "sha256" else member.digests.get(algorithm)
    return None if raw is None else base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def record_findings(contents: Contents) -> list[Finding]:
    wheel = contents.wheel
    if wheel.dist_info is None:
        return [fail(CHECK, "the wheel has no .dist-info directory: not an installable wheel")]
    record_name = f"{wheel.dist_info}/RECORD"
    record = wheel.member(record_name)
    if record is None or record.path is None:
        return [fail(CHECK, f"{record_name} is missing: installers cannot verify or uninstall the wheel")]
    text = record.path.read_text(encoding="utf-8", errors="replace")
    out: list[Finding] = []
    listed: dict[str, tuple[str, str]] = {}
    for row in csv.reader(io.StringIO(text)):
        if not row:
            continue
        if len(row) != 3:
            out.append(fail(CHECK, f"RECORD line {row!r} does not have three fields (path, hash, size)"))
            continue
        path, digest, size = row
        if path in listed:
            out.append(fail(CHECK, f"RECORD lists {path!r} twice"))
        listed[path] = (digest, size)
    files = {m.name: m for m in wheel.members if m.kind == "file"}
    bad: list[str] = []
    for name, member in files.items():
        if name == record_name or name in (f"{wheel.dist_info}/{s}" for s in _SIGNATURES):
            continue
        if name not in listed:
            out.append(fail(CHECK, f"{name} is in the wheel but not in RECORD"))
            continue
        digest, size = listed[name]
        algorithm, _, value = digest.partition("=")
        if algorithm not in _STRONG:
            out.append(
                fail(
                    CHECK,
                    f"RECORD hashes {name} with {algorithm or 'nothing'!r}; wheels need sha256 or stronger",
                )
            )
            continue
        if member.sha256 is None:
            continue  # not read (refused or corrupt): reported as an archive issue
        actual = _record_digest(algorithm, member)
        if actual != value:
            bad.append(name)
            out.append(
                fail(
                    CHECK,
                    f"{name}: RECORD says {algorithm}={value} but the file hashes to {algorithm}={actual}; the "
                    "file changed after RECORD was written (pip refuses to install such a wheel)",
                    member=name,
                )
            )
        elif size and size != str(member.size):
            out.append(fail(CHECK, f"{name}: RECORD says {size} bytes but the file has {member.size}"))
    for name in listed:
        if name not in files and name != record_name and not name.endswith("/"):
            out.append(fail(CHECK, f"RECORD lists {name} but the wheel has no such file"))
    if not out:
        out.append(ok(CHECK, f"RECORD matches all {len(files) - 1} files (sha256 and size)"))
    return _capped(out)


RECORD_FINDINGS_SHOWN = 10


def _capped(findings: list[Finding]) -> list[Finding]:
    """At most RECORD_FINDINGS_SHOWN RECORD findings, then one that counts the rest.

    A hostile RECORD can disagree with a million members; the record and report stay small.
    """
    if len(findings) <= RECORD_FINDINGS_SHOWN:
        return findings
    rest = findings[RECORD_FINDINGS_SHOWN:]
    summary = fail(
        CHECK,
        f"{len(rest):,} more RECORD problems like the ones above, e.g. "
        + first_few([f.message for f in rest], shown=3),
        more=len(rest),
    )
    return [*findings[:RECORD_FINDINGS_SHOWN], summary]


def archive_findings(contents: Contents) -> list[Finding]:
    issues = contents.wheel.issues
    out = [fail(CHECK, issue.message, kind=issue.kind, member=issue.name) for issue in issues]
    if not out:
        out.append(
            ok(CHECK, "no path escapes the wheel; no symlink, special file, repeated name or corrupt member")
        )
    return out


def _unreached(contents: Contents, soname: str, tag: str) -> str | None:
    """Why auditwheel counts ``soname`` as external although the wheel ships a file of that name: the
    files linking it and the search path that misses it; None when the wheel has no such file."""
    shipped = sorted(
        m.name
        for m in contents.wheel.files
        if m.name.rsplit("/", 1)[-1] == soname and installed_dir(m.name) is not None
    )
    if not shipped:
        return None
    folders = {installed_dir(p) for p in shipped}
    linkers = [lib for lib in contents.libraries if lib.elf is not None and soname in lib.elf.needed]
    missing = [lib for lib in linkers if not folders & set(search_dirs(lib))]
    where = " and ".join(shipped)
    if not missing:
        return (
            f"it links {soname}, which {tag} does not allow; the wheel ships it as {where}, but auditwheel "
            "did not resolve it there"
        )
    first = missing[0]
    search, entries = search_path(first)
    origin = installed_dir(first.path)
    target = installed_dir(shipped[0])
    fix = f": add {origin_entry(target or '', origin)!r}" if origin is not None and target is not None else ""
    who = ", ".join(lib.path for lib in missing[:3]) + (
        f" and {len(missing) - 3:,} more" if len(missing) > 3 else ""
    )
    return (
        f"{who} link{'s' if len(missing) == 1 else ''} {soname}, which the wheel ships as {where}, but none "
        f"of {'its' if len(missing) == 1 else 'their'} RPATH/RUNPATH entries reaches it ({first.name}'s "
        f"{search}: {list(entries) or 'none'}), so auditwheel looks for it on the system, where {tag} does not "
        f"allow it{fix}"
    )


def _tag_reason(contents: Contents, abi: AbiReport, tag: str) -> str:
    info = abi.tags.get(tag, {})
    limited = set(info.get("limited_by") or [])
    reasons: list[str] = []
    if "symbol versions" in limited:
        for path, entry in sorted(abi.files.items()):
            symbols = entry.get("beyond_claimed") or []
            if symbols:
                reasons.append(f"{posixpath.basename(path)} needs {', '.join(symbols[-3:])}")
    if "external libraries" in limited:
        libs = info.get("libs_to_eliminate") or []
        absent = []
        for soname in libs:
            unreached = _unreached(contents, soname, tag)
            if unreached is None:
                absent.append(soname)
            else:
                reasons.append(unreached)
        if absent:
            reasons.append(
                f"it links {', '.join(absent)}, which {tag} does not allow and the wheel does not ship"
            )
    if "blacklisted symbols" in limited:
        for lib, symbols in (info.get("blacklisted_symbols") or {}).items():
            reasons.append(f"it uses {lib} symbols that {tag} forbids: {', '.join(symbols[:5])}")
    if "instruction set" in limited:
        reasons.append("an ELF file needs instructions beyond the platform's baseline")
    for other in sorted(
        limited - {"symbol versions", "external libraries", "blacklisted symbols", "instruction set"}
    ):
        reasons.append(f"{other} limit it to {abi.component_tags.get(other)}")
    return "; ".join(reasons) or "see auditwheel show"


def platform_findings(contents: Contents, expectation: Expectation) -> list[Finding]:
    wheel = contents.wheel
    out: list[Finding] = []
    if expectation.platform_tag is not None and expectation.platform_tag not in wheel.platform_tags:
        out.append(
            fail(
                CHECK,
                f"the wheel is tagged {', '.join(wheel.platform_tags)} but row {expectation.row_id} is "
                f"{expectation.platform_tag}",
            )
        )
    if expectation.python is not None:
        tags = parse_wheel_filename(wheel.filename)[3]
        if not any(
            python_tag_matches(expectation.wheel_tags, expectation.python, t.interpreter, t.abi) for t in tags
        ):
            shown = ", ".join(sorted({f"{t.interpreter}-{t.abi}" for t in tags}))
            out.append(
                fail(
                    CHECK,
                    f"the wheel is for {shown} but row {expectation.row_id} is Python {expectation.python} "
                    f"as project.wheel_tags = {expectation.wheel_tags!r} names it",
                )
            )
    elif expectation.python_tag is not None and expectation.python_tag not in wheel.python_tags:
        out.append(
            fail(
                CHECK,
                f"the wheel is for {', '.join(wheel.python_tags)} but row {expectation.row_id} is "
                f"{expectation.python_tag}",
            )
        )
    has_elf = any(lib.elf is not None for lib in contents.libraries)
    if wheel.platform_tags == ("any",):
        if has_elf:
            out.append(
                fail(CHECK, "the wheel is tagged 'any' but ships ELF files; it must carry a platform tag")
            )
        else:
            out.append(ok(CHECK, "pure Python wheel tagged 'any'"))
        return out
    abi = contents.abi
    if abi is None:
        out.append(fail(CHECK, "auditwheel's analysis did not run; the platform tag is unverified"))
        return out
    if not has_elf and contents.libraries:
        out.append(fail(CHECK, "no ELF file of the wheel could be read: the platform tag cannot be verified"))
        return out
    if abi.pure or not has_elf:
        claimed = ", ".join(wheel.platform_tags)
        if expectation.standalone:
            # a third-party wheel: a header-only package may be tagged per platform on purpose
            out.append(
                ok(
                    CHECK,
                    f"note: the wheel is tagged {claimed} but has no platform ELF file; auditwheel would call it a "
                    "pure wheel (tag 'any'), and a header-only package tagged per platform on purpose "
                    "(nvidia-cuda-cccl is) installs only where its tag says: not a failure of a wheel audited "
                    "without a policy",
                )
            )
        else:
            out.append(
                fail(
                    CHECK,
                    f"the wheel is tagged {claimed} but auditwheel finds no platform ELF file in it; a pure wheel "
                    "is tagged 'any'",
                )
            )
        return out
    if abi.error is not None:
        out.append(fail(CHECK, f"auditwheel could not analyse the wheel: {abi.error}"))
        return out
    details = {
        "auditwheel": abi.auditwheel_version,
        "mode": abi.mode,
        "overall_tag": abi.overall_tag,
        "component_tags": dict(abi.component_tags),
        "excluded": len(abi.excluded),
        "policies_graded": abi.policies,
    }
    for tag in wheel.platform_tags:
        info = abi.tags.get(tag)
        if info is None or info.get("policy") is None:
            out.append(
                fail(CHECK, f"platform tag {tag} is not a tag auditwheel knows for this wheel", **details)
            )
        elif info["honest"]:
            out.append(
                ok(
                    CHECK,
                    (
                        f"platform tag {tag} is honest: auditwheel finds the ELF files consistent with "
                        f"{abi.overall_tag} and every later tag"
                        if abi.policies == "all"
                        else f"platform tag {tag} is honest: auditwheel, grading it and every later tag, "
                        "finds the ELF files consistent with it"
                    ),
                    **details,
                )
            )
        else:
            out.append(
                fail(
                    CHECK,
                    f"platform tag {tag} claims more than the wheel allows: auditwheel says {abi.overall_tag} at "
                    f"best ({_tag_reason(contents, abi, tag)}); build on an older manylinux image or tag it {abi.overall_tag}",
                    **details,
                )
            )
    return out


def build_path_findings(contents: Contents) -> list[Finding]:
    """Text members that name a path of the build machine (:mod:`release.audit.reading.buildpaths`)."""
    hits = [m for m in contents.wheel.members if m.build_paths]
    out = [
        fail(
            CHECK,
            f"{m.name} names a path of the build machine: {m.build_paths[0]!r}"
            + (f" (and {len(m.build_paths) - 1} more line(s))" if len(m.build_paths) > 1 else "")
            + "; it exists on no user's machine: compute the path at run time or leave it out",
            member=m.name,
            lines=list(m.build_paths),
        )
        for m in hits[:RECORD_FINDINGS_SHOWN]
    ]
    if len(hits) > RECORD_FINDINGS_SHOWN:
        rest = [m.name for m in hits[RECORD_FINDINGS_SHOWN:]]
        out.append(
            fail(CHECK, f"{len(rest):,} more text files name build paths, e.g. {first_few(rest, shown=3)}")
        )
    if not out:
        out.append(ok(CHECK, "no text file names a build or toolkit path of the build machine"))
    return out


def size_findings(contents: Contents, expectation: Expectation) -> list[Finding]:
    limit = expectation.max_wheel_mib
    if limit is None:
        return []
    mib = contents.wheel.size / (1 << 20)
    if contents.wheel.size > limit * (1 << 20):
        return [fail(CHECK, f"the wheel is {mib:.1f} MiB, over the index's limit of {limit} MiB")]
    return [ok(CHECK, f"the wheel is {mib:.1f} MiB, within the index's limit of {limit} MiB")]


def identity_findings(contents: Contents) -> list[Finding]:
    """What disagrees in the wheel's identity that pip installs anyway (WHEEL's tags or build tag
    against the file name, the .dist-info folder's version): failures, so the wheel still gets a
    verdict; what pip refuses never gets here (the reader raised bad input)."""
    _refused, tolerated = read_identity(contents.wheel)
    return [fail(CHECK, f"{problem} (pip installs it anyway)") for problem in tolerated]


def check(contents: Contents, expectation: Expectation) -> list[Finding]:
    return (
        identity_findings(contents)
        + archive_findings(contents)
        + record_findings(contents)
        + owner_findings(contents)
        + grafted_findings(contents)
        + build_path_findings(contents)
        + platform_findings(contents, expectation)
        + size_findings(contents, expectation)
    )


# this check, as release.audit.registry lists it
SPEC = Check(CHECK, "hygiene", check, needs_claim=False)
