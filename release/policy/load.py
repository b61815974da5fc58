"""Load and validate rows.toml into frozen dataclasses.

Validation happens once, on load, against the file actually read. Every error names
the file, the key path (``train."13.0".gpu_archs.x86_64[6]``), what is wrong and how to
fix it. Cross-row rules (every train has an arch list per platform, PTX exactly on the
newest arch, no duplicate rows, variant names match their train, the PyPI toolchain
pins an nvcc of the train's version), every index name and URL, every target rule, and
that ``project.path`` is a folder holding a Python project (last, as it reads the file
system) are checked here too, so nothing downstream has to re-check them.

The file is read by :mod:`release.policy.read` (regular files only, size-capped, its
sha256 computed once); one train table is loaded by :mod:`release.policy.trains`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from packaging.utils import canonicalize_name

from release.policy.checker import Checker, brief, join, kind
from release.policy.jetson import load_jetsons
from release.policy.model import (
    GPU_COVERAGE,
    MANYLINUX_ARCHS,
    SCHEMA,
    SCHEMA_VERSION,
    WHEEL_TAGS,
    Dependency,
    Exclusion,
    Policy,
    PolicyTarget,
    Project,
    RejectAllow,
    WheelTags,
)
from release.policy.read import read_policy_file
from release.policy.targets import IndexTarget, url_problem, variant_index_problems
from release.policy.trains import load_train
from release.policy.versions import is_free_threaded, name_problem, python_problem, train_problem

_Excluded = Mapping[tuple[str, str], Exclusion]


DEFAULT_POLICY = "rows.toml"


def default_policy(env: Mapping[str, str]) -> str:
    """The policy file a command reads without ``--policy``: ``$WHEELWRIGHT_POLICY``, else rows.toml
    (the same in nox and in every ``python -m release`` command)."""
    return env.get("WHEELWRIGHT_POLICY") or DEFAULT_POLICY


def load_policy(path: str | Path) -> Policy:
    """Read and validate a policy file. Raises PolicyError (exit 2) on any problem."""
    f = read_policy_file(path)
    return parse_policy(f.data, f.shown, source=f.source, sha256=f.sha256)


def parse_policy(data: Mapping[str, Any], path: str, *, source: Path, sha256: str) -> Policy:
    """Validate a parsed policy table; ``path`` names the file in messages."""
    c = Checker(path)
    top = c.table(dict(data), "", *SCHEMA["top level"])
    version = top["schema_version"]
    if type(version) is not int or version != SCHEMA_VERSION:
        shown = f"{brief(version)} ({kind(version)})" if type(version) is not int else brief(version)
        raise c.fail(
            "schema_version",
            f"{shown} is not supported; this wheelwright reads schema_version = {SCHEMA_VERSION} "
            "(an integer)",
        )

    exclusions = _exclusions(c, top.get("exclude", []))
    excluded: _Excluded = {(e.kind, e.value): e for e in exclusions}
    base = source.parent
    project = _project(c, top["project"], base)

    m = c.table(top["matrix"], "matrix", *SCHEMA["matrix"])
    platforms = c.strings(m["platforms"], "matrix.platforms", nonempty=False)
    for i, plat in enumerate(platforms):
        ex = excluded.get(("platform", plat))
        if ex:
            raise c.fail(f"matrix.platforms[{i}]", f"{plat!r} is excluded: {ex.reason}")
        c.token(plat, f"matrix.platforms[{i}]")
        if plat not in MANYLINUX_ARCHS:
            raise c.fail(
                f"matrix.platforms[{i}]",
                f"{brief(plat)} is not a manylinux CPU architecture; use one of: {', '.join(MANYLINUX_ARCHS)}",
            )
    pythons = c.strings(m["pythons"], "matrix.pythons", nonempty=False)
    for key, values in (("platforms", platforms), ("pythons", pythons)):
        if not values:
            raise c.fail(
                f"matrix.{key}",
                f"the matrix is empty: matrix.{key} lists nothing; a release with no rows is refused",
            )
    for i, py in enumerate(pythons):
        _check_python(c, py, f"matrix.pythons[{i}]", excluded)
    cpu_wheel = c.choice(m["cpu_wheel"], "matrix.cpu_wheel", ("enable", "disable")) == "enable"
    manylinux = c.string(m["manylinux"], "matrix.manylinux")
    if not re.fullmatch(r"manylinux_2_[0-9]{1,3}", manylinux, flags=re.ASCII):
        raise c.fail("matrix.manylinux", f"{brief(manylinux)} is not a PEP 600 tag like 'manylinux_2_28'")
    extra = c.choice(m.get("extra_variants", "reject"), "matrix.extra_variants", ("reject", "allow"))
    extra_variants: RejectAllow = "allow" if extra == "allow" else "reject"
    embedded = c.choice(
        m.get("embedded_device_code", "reject"), "matrix.embedded_device_code", ("reject", "allow")
    )
    embedded_device_code: RejectAllow = "allow" if embedded == "allow" else "reject"

    train_list = c.strings(m["trains"], "matrix.trains", nonempty=False)
    if not train_list and not cpu_wheel:
        raise c.fail(
            "matrix.trains",
            'the matrix is empty: no CUDA trains and cpu_wheel = "disable"; a release with no rows is refused',
        )
    train_tables = top["train"]
    if not isinstance(train_tables, dict):
        raise c.fail("train", f'expected tables [train."X.Y"], got {kind(train_tables)}')
    for i, version in enumerate(train_list):
        problem = train_problem(version)
        if problem:
            raise c.fail(f"matrix.trains[{i}]", problem)
        if version not in train_tables:
            raise c.fail(
                f"matrix.trains[{i}]",
                f'CUDA {version} has no [train."{version}"] table; add one with its gpu_archs '
                "(there is no fallback to detecting the builder's GPU)",
            )
    listed = set(train_list)
    for version in train_tables:
        if version not in listed:
            raise c.fail(
                join("train", version),
                f"train {brief(version)[1:-1]} is defined but not listed in matrix.trains; "
                "add it there or delete the table",
            )

    trains = tuple(load_train(c, v, train_tables[v], platforms, pythons, base) for v in train_list)
    variants: dict[str, str] = {}
    for t in trains:
        if t.variant in variants:
            raise c.fail(
                join(join("train", t.version), "variant"),
                f"variant {t.variant!r} is also used by train {variants[t.variant]}; rows would collide",
            )
        variants[t.variant] = t.version

    targets = _targets(c, top.get("target", {}), tuple(["cpu"] if cpu_wheel else []) + tuple(variants))
    dependencies = _dependencies(c, top.get("dependency", []), platforms, tuple(variants))
    jetsons = load_jetsons(c, top.get("jetson", []), {v: k for k, v in variants.items()}, pythons)
    _check_project_folder(c, project.path, source)
    return Policy(
        notes=tuple(c.notes),
        path=path,
        source=source,
        sha256=sha256,
        dependencies=dependencies,
        targets=targets,
        project=project,
        platforms=platforms,
        pythons=pythons,
        trains=trains,
        cpu_wheel=cpu_wheel,
        manylinux=manylinux,
        extra_variants=extra_variants,
        embedded_device_code=embedded_device_code,
        exclusions=exclusions,
        jetsons=jetsons,
    )


def _members(
    c: Checker,
    t: dict[str, object],
    where: str,
    key: str,
    allowed: tuple[str, ...],
    what: str,
    *,
    unused: tuple[str, ...] = (),
) -> tuple[str, ...]:
    """The optional list ``t[key]``, each item one of ``allowed``; an item in ``unused`` (an arch
    this matrix dropped) is noted, not refused."""
    items = c.strings(t.get(key, []), f"{where}.{key}", nonempty=False)
    for j, item in enumerate(items):
        if item in allowed:
            continue
        if item in unused:
            c.note(
                f"{where}.{key}[{j}]", f"{item} is not {what} ({', '.join(allowed)}); unused by this matrix"
            )
        else:
            raise c.fail(f"{where}.{key}[{j}]", f"{brief(item)} is not {what} ({', '.join(allowed)})")
    return items


def _dependencies(
    c: Checker, value: object, platforms: tuple[str, ...], variants: tuple[str, ...]
) -> tuple[Dependency, ...]:
    out: list[Dependency] = []
    for where, t in c.entries(value, "dependency", *SCHEMA["dependency"]):
        package = c.string(t["package"], f"{where}.package")
        problem = name_problem(package)
        if problem:
            raise c.fail(f"{where}.package", problem)
        index = c.string(t["index"], f"{where}.index")
        problem = url_problem(index, "channel")
        if problem:
            raise c.fail(f"{where}.index", problem)
        plats = _members(c, t, where, "platforms", platforms, "in matrix.platforms", unused=MANYLINUX_ARCHS)
        vars_ = _members(c, t, where, "variants", variants, "a CUDA variant of this policy")
        libs = c.strings(t.get("libraries", []), f"{where}.libraries", nonempty=False)
        for j, lib in enumerate(libs):
            c.token(lib, f"{where}.libraries[{j}]")
            if not re.fullmatch(r"lib[A-Za-z0-9_.+-]*\.so(\.[0-9]+)*", lib, flags=re.ASCII):
                raise c.fail(
                    f"{where}.libraries[{j}]",
                    f"{brief(lib)} is not a shared library's soname like 'libc10.so' or 'libfoo.so.1'",
                )
        coverage = c.choice(t.get("gpu_coverage", "report"), f"{where}.gpu_coverage", GPU_COVERAGE)
        out.append(Dependency(package, index, plats, vars_, libs, coverage))
    return tuple(out)


def _targets(c: Checker, value: object, variants: tuple[str, ...]) -> dict[str, PolicyTarget]:
    if not isinstance(value, dict):
        raise c.fail("target", f"expected [target.<name>] tables, got {kind(value)}")
    out: dict[str, PolicyTarget] = {}
    for name, raw in value.items():
        where = join("target", name)
        c.token(name, where)
        t = c.table(raw, where, *SCHEMA["target.NAME"])
        rehearsal = c.boolean(t["rehearsal"], f"{where}.rehearsal")
        local = c.boolean(t.get("local_server", False), f"{where}.local_server")
        if local and not rehearsal:
            raise c.fail(
                f"{where}.local_server", "a local index server is for rehearsals only; set rehearsal = true"
            )
        index_raw = t.get("index", {})
        if not isinstance(index_raw, dict):
            raise c.fail(f"{where}.index", f"expected a table of variant = {{...}}, got {kind(index_raw)}")
        if local and index_raw:
            raise c.fail(
                f"{where}.index",
                "a local_server target gets its URLs from the server it starts; remove index",
            )
        indexes: dict[str, IndexTarget] = {}
        for variant, entry in index_raw.items():
            iw = join(f"{where}.index", variant)
            if variant not in variants:
                close = difflib.get_close_matches(variant, variants, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else f"; variants are: {', '.join(variants)}"
                raise c.fail(iw, f"unknown variant {brief(variant)}{hint}")
            e = c.table(entry, iw, *SCHEMA["target.NAME.index.VARIANT"])
            upload = c.string(e["upload_url"], f"{iw}.upload_url")
            simple = c.string(e["simple_url"], f"{iw}.simple_url")
            for key, url in (("upload_url", upload), ("simple_url", simple)):
                problem = url_problem(url, "rehearsal" if rehearsal else "production")
                if problem:
                    raise c.fail(f"{iw}.{key}", problem)
            limit = e.get("max_wheel_mib")
            if limit is not None and (type(limit) is not int or limit <= 0):
                raise c.fail(f"{iw}.max_wheel_mib", f"expected a positive integer, got {brief(limit)}")
            indexes[variant] = IndexTarget(variant, upload, simple, limit)
        for variant, key, problem in variant_index_problems(indexes):
            raise c.fail(f"{join(f'{where}.index', variant)}.{key}", problem)
        if not local:
            missing = [v for v in variants if v not in indexes]
            if missing:
                raise c.fail(
                    f"{where}.index",
                    f"no index for variant(s) {', '.join(missing)}; every variant needs "
                    f"[{where}.index.<variant>] with upload_url and simple_url",
                )
        out[name] = PolicyTarget(name, rehearsal, local, indexes)
    return out


def _check_python(c: Checker, py: str, where: str, excluded: _Excluded) -> None:
    ex = excluded.get(("python", py))
    if ex:
        raise c.fail(where, f"Python {py} is excluded: {ex.reason}")
    problem = python_problem(py)
    if problem:
        raise c.fail(where, problem)
    if is_free_threaded(py):
        raise c.fail(where, f"{py!r} is a free-threaded build; no exclusion allows it and none is supported")


def _project(c: Checker, value: object, base: Path) -> Project:
    t = c.table(value, "project", *SCHEMA["project"])
    name = c.string(t["name"], "project.name")
    problem = name_problem(name)
    if problem:
        raise c.fail("project.name", problem)
    if canonicalize_name(name) != name.lower().replace("_", "-"):
        raise c.fail("project.name", f"{name!r} is not a valid distribution name")
    path = c.string(t["path"], "project.path")
    if PurePosixPath(path).is_absolute() or "\\" in path:
        raise c.fail(
            "project.path",
            f"{brief(path)} must be relative to the policy file's folder, in POSIX spelling ('.' for that folder)",
        )
    import_name = c.string(t["import_name"], "project.import_name")
    if not import_name.isidentifier():
        raise c.fail("project.import_name", f"{brief(import_name)} is not a Python identifier")
    check = _entry_point(c, t["check"], "project.check") if "check" in t else None
    sdk = _entry_point(c, t["sdk"], "project.sdk") if "sdk" in t else None
    rtol = c.tolerance(t.get("rtol", 0.0), "project.rtol")
    atol = c.tolerance(t.get("atol", 0.0), "project.atol")
    if check is None:
        for key in ("rtol", "atol"):
            if key in t:
                raise c.fail(f"project.{key}", "a tolerance needs a check to apply to; set project.check")
    tags = c.choice(t.get("wheel_tags", "cpython"), "project.wheel_tags", WHEEL_TAGS)
    wheel_tags: WheelTags = next(w for w in WHEEL_TAGS if w == tags)
    constraints = (
        c.relative_files(t["build_constraints"], "project.build_constraints", base)
        if "build_constraints" in t
        else ()
    )
    return Project(name, path, import_name, check, sdk, rtol, atol, wheel_tags, constraints)


def _check_project_folder(c: Checker, path: str, source: Path) -> None:
    """``project.path`` must name a folder holding a Python project (pyproject.toml or setup.py).

    Resolved as the build resolves it: against the folder of the policy file with symlinks
    followed (:mod:`release.wheelbuild.run`). Checked last, after every rule of the file itself,
    because it reads the file system: a policy with a mistake of its own is told that first.
    """
    base = source.resolve().parent
    fix = (
        "set project.path to the folder that holds the package's pyproject.toml (or setup.py), "
        f"relative to the policy file's folder ({base}); '.' is that folder"
    )
    folder = base / path
    try:
        folder = folder.resolve()
        exists, is_dir = folder.exists(), folder.is_dir()
        has_project = is_dir and any((folder / name).is_file() for name in ("pyproject.toml", "setup.py"))
    except (OSError, RuntimeError, ValueError) as exc:  # no permission, a symlink loop, a NUL
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise c.fail("project.path", f"{brief(path)} ({folder}) cannot be read: {reason}; {fix}") from None
    if not exists:
        raise c.fail("project.path", f"{brief(path)} ({folder}) does not exist; {fix}")
    if not is_dir:
        raise c.fail("project.path", f"{brief(path)} ({folder}) is not a folder; {fix}")
    if not has_project:
        raise c.fail(
            "project.path",
            f"{brief(path)} ({folder}) holds no Python project (no pyproject.toml and no setup.py); {fix}",
        )


def _entry_point(c: Checker, value: object, where: str) -> str:
    text = c.string(value, where)
    module, _, func = text.partition(":")
    if not func or not all(p.isidentifier() for p in [*module.split("."), func]):
        raise c.fail(where, f"{brief(text)} is not 'module:function' (e.g. 'tinyaxpy:selftest')")
    return text


def _exclusions(c: Checker, value: object) -> tuple[Exclusion, ...]:
    out: list[Exclusion] = []
    for where, t in c.entries(value, "exclude", *SCHEMA["exclude"]):
        kinds = [k for k in ("python", "platform") if k in t]
        if len(kinds) != 1:
            raise c.fail(
                where, "each [[exclude]] names exactly one of 'python' or 'platform', plus a 'reason'"
            )
        what: Literal["python", "platform"] = "python" if kinds[0] == "python" else "platform"
        reason = c.string(t["reason"], f"{where}.reason")
        out.append(Exclusion(what, c.token(t[what], f"{where}.{what}"), reason))
    return tuple(out)
