"""Load and validate rows.toml into frozen dataclasses.

Validation happens once, on load. Every error names the file, the key path
(``train."13.0".gpu_archs.x86_64[6]``), what is wrong and how to fix it.
Cross-row rules (every train has an arch list per platform, PTX exactly on the
newest arch, no duplicate rows, variant names match their train) are checked here
too, so nothing downstream has to re-check them.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from release.core.errors import PolicyError
from release.policy.archs import Arch, ArchSyntaxError, parse_arch
from release.policy.model import (
    MANYLINUX_ARCHS,
    SCHEMA,
    SCHEMA_VERSION,
    CudaPackage,
    Dependency,
    Exclusion,
    Policy,
    PolicyTarget,
    Project,
    RejectAllow,
    Train,
)
from release.policy.targets import IndexTarget

# --------------------------------------------------------------------------- helpers


class _Checker:
    """Type and key checks that raise PolicyError with the file and key path."""

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, where: str, message: str) -> PolicyError:
        return PolicyError(self.path, where, message)

    def table(
        self, value: object, where: str, required: tuple[str, ...], optional: tuple[str, ...]
    ) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where or "top level", f"expected a table, got {_kind(value)}")
        allowed = (*required, *optional)
        for key in value:
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else f"; allowed keys: {', '.join(allowed)}"
                raise self.fail(_join(where, key), f"unknown key {key!r}{hint}")
        for key in required:
            if key not in value:
                raise self.fail(_join(where, key), f"missing required key {key!r}")
        return value

    def string(self, value: object, where: str, *, nonempty: bool = True) -> str:
        if not isinstance(value, str):
            raise self.fail(where, f"expected a string, got {_kind(value)} {value!r}")
        if nonempty and not value.strip():
            raise self.fail(where, "must not be empty")
        return value

    def strings(self, value: object, where: str, *, nonempty: bool = True) -> tuple[str, ...]:
        if not isinstance(value, list):
            raise self.fail(where, f"expected a list of strings, got {_kind(value)} {value!r}")
        if nonempty and not value:
            raise self.fail(where, "must not be an empty list")
        out = tuple(self.string(v, f"{where}[{i}]") for i, v in enumerate(value))
        seen: set[str] = set()
        for i, v in enumerate(out):
            if v in seen:
                raise self.fail(f"{where}[{i}]", f"duplicate entry {v!r}; list it once")
            seen.add(v)
        return out

    def choice(self, value: object, where: str, choices: tuple[str, ...]) -> str:
        text = self.string(value, where)
        if text not in choices:
            close = difflib.get_close_matches(text, choices, n=1, cutoff=0.5)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise self.fail(where, f"{text!r} is not allowed; {hint}use exactly one of: {', '.join(choices)}")
        return text


def _kind(value: object) -> str:
    return {
        dict: "a table",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a float",
    }.get(type(value), type(value).__name__)


def _join(where: str, key: str) -> str:
    part = key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else f'"{key}"'
    return f"{where}.{part}" if where else part


_PY_RE = re.compile(r"^3\.(\d{1,2})(t?)$")
_TRAIN_RE = re.compile(r"^(\d{2})\.(\d)$")


# --------------------------------------------------------------------------- loading


def load_policy(path: str | Path) -> Policy:
    """Read and validate a policy file. Raises PolicyError (exit 2) on any problem."""
    p = Path(path)
    shown = str(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise PolicyError(shown, "", "file not found; pass --policy PATH or run from the repo root") from None
    except OSError as exc:
        raise PolicyError(shown, "", f"cannot read: {exc.strerror}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise PolicyError(shown, "", "not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(shown, "", f"not valid TOML: {exc}") from None
    return parse_policy(data, shown)


def parse_policy(data: Mapping[str, Any], path: str = "rows.toml") -> Policy:
    c = _Checker(path)
    top = c.table(dict(data), "", *SCHEMA["top level"])
    version = top["schema_version"]
    if version != SCHEMA_VERSION or isinstance(version, bool):
        raise c.fail(
            "schema_version",
            f"{version!r} is not supported; this wheelwright reads schema_version = {SCHEMA_VERSION}",
        )

    exclusions = _exclusions(c, top.get("exclude", []))
    project = _project(c, top["project"])

    m = c.table(top["matrix"], "matrix", *SCHEMA["matrix"])
    platforms = c.strings(m["platforms"], "matrix.platforms", nonempty=False)
    for i, plat in enumerate(platforms):
        ex = _excluded("platform", plat, exclusions)
        if ex:
            raise c.fail(f"matrix.platforms[{i}]", f"{plat!r} is excluded: {ex.reason}")
        if plat not in MANYLINUX_ARCHS:
            raise c.fail(
                f"matrix.platforms[{i}]",
                f"{plat!r} is not a manylinux CPU architecture; use one of: {', '.join(MANYLINUX_ARCHS)}",
            )
    pythons = c.strings(m["pythons"], "matrix.pythons", nonempty=False)
    for key, values in (("platforms", platforms), ("pythons", pythons)):
        if not values:
            raise c.fail(
                f"matrix.{key}",
                f"the matrix is empty: matrix.{key} lists nothing; a release with no rows is refused",
            )
    for i, py in enumerate(pythons):
        _check_python(c, py, f"matrix.pythons[{i}]", exclusions)
    cpu_wheel = c.choice(m["cpu_wheel"], "matrix.cpu_wheel", ("enable", "disable")) == "enable"
    manylinux = c.string(m["manylinux"], "matrix.manylinux")
    if not re.fullmatch(r"manylinux_2_\d+", manylinux):
        raise c.fail("matrix.manylinux", f"{manylinux!r} is not a PEP 600 tag like 'manylinux_2_28'")
    extra = c.choice(m.get("extra_variants", "reject"), "matrix.extra_variants", ("reject", "allow"))
    extra_variants: RejectAllow = "allow" if extra == "allow" else "reject"

    train_list = c.strings(m["trains"], "matrix.trains", nonempty=False)
    if not train_list and not cpu_wheel:
        raise c.fail(
            "matrix.trains",
            'the matrix is empty: no CUDA trains and cpu_wheel = "disable"; a release with no rows is refused',
        )
    train_tables = top["train"]
    if not isinstance(train_tables, dict):
        raise c.fail("train", f'expected tables [train."X.Y"], got {_kind(train_tables)}')
    for i, version in enumerate(train_list):
        if not _TRAIN_RE.match(version):
            raise c.fail(f"matrix.trains[{i}]", f"{version!r} is not a CUDA version like '13.0'")
        if version not in train_tables:
            raise c.fail(
                f"matrix.trains[{i}]",
                f'CUDA {version} has no [train."{version}"] table; add one with its gpu_archs '
                "(there is no fallback to detecting the builder's GPU)",
            )
    for version in train_tables:
        if version not in train_list:
            raise c.fail(
                _join("train", version),
                f"train {version} is defined but not listed in matrix.trains; add it there or delete the table",
            )

    trains = tuple(_train(c, v, train_tables[v], platforms, pythons) for v in train_list)
    variants: dict[str, str] = {}
    for t in trains:
        if t.variant in variants:
            raise c.fail(
                _join(_join("train", t.version), "variant"),
                f"variant {t.variant!r} is also used by train {variants[t.variant]}; rows would collide",
            )
        variants[t.variant] = t.version

    targets = _targets(c, top.get("target", {}), tuple(["cpu"] if cpu_wheel else []) + tuple(variants))
    dependencies = _dependencies(c, top.get("dependency", []), platforms, tuple(variants))
    return Policy(
        dependencies=dependencies,
        targets=targets,
        path=path,
        project=project,
        platforms=platforms,
        pythons=pythons,
        trains=trains,
        cpu_wheel=cpu_wheel,
        manylinux=manylinux,
        extra_variants=extra_variants,
        exclusions=exclusions,
    )


def _dependencies(
    c: _Checker, value: object, platforms: tuple[str, ...], variants: tuple[str, ...]
) -> tuple[Dependency, ...]:
    if not isinstance(value, list):
        raise c.fail("dependency", f"expected [[dependency]] entries, got {_kind(value)}")
    out: list[Dependency] = []
    for i, item in enumerate(value):
        where = f"dependency[{i}]"
        t = c.table(item, where, *SCHEMA["dependency"])
        package = c.string(t["package"], f"{where}.package")
        index = c.string(t["index"], f"{where}.index")
        if "://" not in index and index != "pypi":
            raise c.fail(f"{where}.index", f"{index!r} is neither a simple index URL nor 'pypi'")
        plats = c.strings(t.get("platforms", []), f"{where}.platforms", nonempty=False)
        for j, plat in enumerate(plats):
            if plat not in platforms:
                raise c.fail(
                    f"{where}.platforms[{j}]", f"{plat!r} is not in matrix.platforms ({', '.join(platforms)})"
                )
        vars_ = c.strings(t.get("variants", []), f"{where}.variants", nonempty=False)
        for j, v in enumerate(vars_):
            if v not in variants:
                raise c.fail(
                    f"{where}.variants[{j}]",
                    f"{v!r} is not a CUDA variant of this policy ({', '.join(variants)})",
                )
        out.append(Dependency(package, index, plats, vars_))
    return tuple(out)


def _targets(c: _Checker, value: object, variants: tuple[str, ...]) -> dict[str, PolicyTarget]:
    if not isinstance(value, dict):
        raise c.fail("target", f"expected [target.<name>] tables, got {_kind(value)}")
    out: dict[str, PolicyTarget] = {}
    for name, raw in value.items():
        where = _join("target", name)
        t = c.table(raw, where, *SCHEMA["target.NAME"])
        if not isinstance(t["rehearsal"], bool):
            raise c.fail(f"{where}.rehearsal", f"expected true or false, got {_kind(t['rehearsal'])}")
        local = t.get("local_server", False)
        if not isinstance(local, bool):
            raise c.fail(f"{where}.local_server", f"expected true or false, got {_kind(local)}")
        if local and not t["rehearsal"]:
            raise c.fail(
                f"{where}.local_server", "a local index server is for rehearsals only; set rehearsal = true"
            )
        index_raw = t.get("index", {})
        if not isinstance(index_raw, dict):
            raise c.fail(f"{where}.index", f"expected a table of variant = {{...}}, got {_kind(index_raw)}")
        if local and index_raw:
            raise c.fail(
                f"{where}.index",
                "a local_server target gets its URLs from the server it starts; remove index",
            )
        indexes: dict[str, IndexTarget] = {}
        for variant, entry in index_raw.items():
            iw = _join(f"{where}.index", variant)
            if variant not in variants:
                close = difflib.get_close_matches(variant, variants, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else f"; variants are: {', '.join(variants)}"
                raise c.fail(iw, f"unknown variant {variant!r}{hint}")
            e = c.table(entry, iw, *SCHEMA["target.NAME.index.VARIANT"])
            upload = c.string(e["upload_url"], f"{iw}.upload_url")
            simple = c.string(e["simple_url"], f"{iw}.simple_url")
            for key, url in (("upload_url", upload), ("simple_url", simple)):
                if "@" in url.split("://", 1)[-1].split("/", 1)[0]:
                    raise c.fail(
                        f"{iw}.{key}", "credentials never go in rows.toml; set them in the environment"
                    )
            limit = e.get("max_wheel_mib")
            if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0):
                raise c.fail(f"{iw}.max_wheel_mib", f"expected a positive integer, got {limit!r}")
            indexes[variant] = IndexTarget(variant, upload, simple, limit)
        if not local:
            missing = [v for v in variants if v not in indexes]
            if missing:
                raise c.fail(
                    f"{where}.index",
                    f"no index for variant(s) {', '.join(missing)}; every variant needs "
                    f"[{where}.index.<variant>] with upload_url and simple_url",
                )
        out[name] = PolicyTarget(name, t["rehearsal"], local, indexes)
    return out


def _excluded(kind: str, value: str, exclusions: tuple[Exclusion, ...]) -> Exclusion | None:
    for e in exclusions:
        if e.kind == kind and e.value == value:
            return e
    return None


def _check_python(c: _Checker, py: str, where: str, exclusions: tuple[Exclusion, ...]) -> None:
    ex = _excluded("python", py, exclusions)
    if ex:
        raise c.fail(where, f"Python {py} is excluded: {ex.reason}")
    match = _PY_RE.match(py)
    if not match:
        raise c.fail(where, f"{py!r} is not a CPython version like '3.12'")
    if match[2]:
        raise c.fail(where, f"{py!r} is a free-threaded build; no exclusion allows it and none is supported")


def _project(c: _Checker, value: object) -> Project:
    t = c.table(value, "project", *SCHEMA["project"])
    name = c.string(t["name"], "project.name")
    if canonicalize_name(name) != name.lower().replace("_", "-"):
        raise c.fail("project.name", f"{name!r} is not a valid distribution name")
    path = c.string(t["path"], "project.path")
    if PurePosixPath(path).is_absolute() or ".." in PurePosixPath(path).parts:
        raise c.fail("project.path", f"{path!r} must be a path inside the repository, relative to it")
    import_name = c.string(t["import_name"], "project.import_name")
    if not import_name.isidentifier():
        raise c.fail("project.import_name", f"{import_name!r} is not a Python identifier")
    check = _entry_point(c, t["check"], "project.check")
    sdk = _entry_point(c, t["sdk"], "project.sdk") if "sdk" in t else None
    return Project(name, path, import_name, check, sdk)


def _entry_point(c: _Checker, value: object, where: str) -> str:
    text = c.string(value, where)
    module, _, func = text.partition(":")
    if not func or not all(p.isidentifier() for p in [*module.split("."), func]):
        raise c.fail(where, f"{text!r} is not 'module:function' (e.g. 'tinyaxpy:selftest')")
    return text


def _exclusions(c: _Checker, value: object) -> tuple[Exclusion, ...]:
    if not isinstance(value, list):
        raise c.fail("exclude", f"expected [[exclude]] entries, got {_kind(value)}")
    out: list[Exclusion] = []
    for i, item in enumerate(value):
        where = f"exclude[{i}]"
        t = c.table(item, where, *SCHEMA["exclude"])
        kinds = [k for k in ("python", "platform") if k in t]
        if len(kinds) != 1:
            raise c.fail(
                where, "each [[exclude]] names exactly one of 'python' or 'platform', plus a 'reason'"
            )
        kind: Literal["python", "platform"] = "python" if kinds[0] == "python" else "platform"
        reason = c.string(t["reason"], f"{where}.reason")
        out.append(Exclusion(kind, c.string(t[kind], f"{where}.{kind}"), reason))
    return tuple(out)


def _train(
    c: _Checker,
    version: str,
    value: object,
    platforms: tuple[str, ...],
    pythons: tuple[str, ...],
) -> Train:
    where = _join("train", version)
    t = c.table(value, where, *SCHEMA["train.X.Y"])
    major, minor = _TRAIN_RE.match(version).groups()  # type: ignore[union-attr]
    expected_variant = f"cu{major}{minor}"
    variant = c.string(t["variant"], f"{where}.variant")
    if variant != expected_variant:
        raise c.fail(
            f"{where}.variant",
            f"{variant!r} does not match CUDA {version}; the variant for {version} is {expected_variant!r}",
        )

    images = c.table(t["builder_image"], f"{where}.builder_image", platforms, ())
    builder_images = {p: c.string(images[p], f"{where}.builder_image.{p}") for p in platforms}

    if not isinstance(t["gpu_archs"], dict):
        raise c.fail(
            f"{where}.gpu_archs", f"expected a table of platform = [archs], got {_kind(t['gpu_archs'])}"
        )
    for p in t["gpu_archs"]:
        if p not in platforms:
            close = difflib.get_close_matches(p, platforms, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; platforms are: {', '.join(platforms)}"
            raise c.fail(f"{where}.gpu_archs.{p}", f"unknown platform {p!r}{hint}")
    gpu_archs: dict[str, tuple[Arch, ...]] = {}
    for p in platforms:
        key = f"{where}.gpu_archs.{p}"
        if p not in t["gpu_archs"] or t["gpu_archs"][p] == []:
            raise c.fail(
                key,
                f"CUDA {version} on {p} has no arch list; write the GPU architectures this row must "
                'carry (e.g. ["8.0", "9.0+PTX"]); wheelwright never falls back to detecting the '
                "builder's GPU",
            )
        gpu_archs[p] = _arch_list(c, t["gpu_archs"][p], key)

    packages_raw = t["cuda_packages"]
    if not isinstance(packages_raw, list) or not packages_raw:
        raise c.fail(
            f"{where}.cuda_packages",
            'a CUDA train must list the CUDA packages its wheels declare ([[train."X.Y".cuda_packages]])',
        )
    packages = tuple(_package(c, item, f"{where}.cuda_packages[{i}]") for i, item in enumerate(packages_raw))

    pins = c.strings(t.get("pypi_toolchain", []), f"{where}.pypi_toolchain", nonempty=False)
    for i, pin in enumerate(pins):
        try:
            req = Requirement(pin)
        except InvalidRequirement as exc:
            raise c.fail(f"{where}.pypi_toolchain[{i}]", f"{pin!r} is not a requirement: {exc}") from None
        specs = list(req.specifier)
        if len(specs) != 1 or specs[0].operator != "==" or "*" in specs[0].version:
            raise c.fail(
                f"{where}.pypi_toolchain[{i}]",
                f"{pin!r} must be pinned to one exact version (name==X.Y.Z); the toolchain parts must match",
            )
    hint = c.string(t.get("host_toolchain_hint", ""), f"{where}.host_toolchain_hint", nonempty=False)

    train_pythons = pythons
    if "pythons" in t:
        train_pythons = c.strings(t["pythons"], f"{where}.pythons")
        for i, py in enumerate(train_pythons):
            if py not in pythons:
                raise c.fail(
                    f"{where}.pythons[{i}]",
                    f"Python {py} is outside the allowlist matrix.pythons ({', '.join(pythons)}); "
                    "add it there first",
                )
    return Train(
        version=version,
        variant=variant,
        builder_images=builder_images,
        gpu_archs=gpu_archs,
        cuda_packages=packages,
        pypi_toolchain=pins,
        host_toolchain_hint=hint,
        pythons=train_pythons,
    )


def _arch_list(c: _Checker, value: object, where: str) -> tuple[Arch, ...]:
    items = c.strings(value, where)
    archs: list[Arch] = []
    for i, item in enumerate(items):
        try:
            archs.append(parse_arch(item))
        except ArchSyntaxError as exc:
            raise c.fail(f"{where}[{i}]", str(exc)) from None
    seen: dict[tuple[int, str], int] = {}
    for i, a in enumerate(archs):
        if (a.cc, a.variant) in seen:
            raise c.fail(f"{where}[{i}]", f"{items[i]!r} repeats {items[seen[(a.cc, a.variant)]]!r}")
        seen[(a.cc, a.variant)] = i
    newest = max(a.cc for a in archs)
    for i, a in enumerate(archs):
        if a.ptx and a.cc != newest:
            raise c.fail(
                f"{where}[{i}]",
                f"'+PTX' is on {items[i]!r} but the newest arch of this row is {newest // 10}.{newest % 10}; "
                "ship PTX for the newest arch only (it is what a newer GPU JIT-compiles)",
            )
    if not any(a.ptx for a in archs):
        i = max(range(len(archs)), key=lambda j: archs[j].cc)
        raise c.fail(
            f"{where}[{i}]",
            f"the newest arch {items[i]!r} must also ship as PTX so newer GPUs can JIT it; write '{items[i]}+PTX'",
        )
    return tuple(archs)


def _package(c: _Checker, value: object, where: str) -> CudaPackage:
    t = c.table(value, where, *SCHEMA["train.X.Y.cuda_packages"])
    name = c.string(t["name"], f"{where}.name")
    try:
        parsed = Requirement(name)
    except InvalidRequirement:
        parsed = None
    if parsed is None or parsed.name != name or parsed.specifier or parsed.extras or parsed.marker:
        raise c.fail(
            f"{where}.name",
            f"{name!r} is not a bare distribution name; pins come from the train, other forms go in also_accepted",
        )
    also = c.strings(t.get("also_accepted", []), f"{where}.also_accepted", nonempty=False)
    for i, form in enumerate(also):
        try:
            Requirement(form)
        except InvalidRequirement as exc:
            raise c.fail(f"{where}.also_accepted[{i}]", f"{form!r} is not a requirement: {exc}") from None
    libs = c.strings(t["libraries"], f"{where}.libraries")
    installs_to = c.string(t["installs_to"], f"{where}.installs_to")
    pp = PurePosixPath(installs_to)
    if pp.is_absolute() or ".." in pp.parts:
        raise c.fail(
            f"{where}.installs_to",
            f"{installs_to!r} must be relative to site-packages, like 'nvidia/cu13/lib'",
        )
    return CudaPackage(str(canonicalize_name(name)), also, libs, installs_to)
