"""One ``$ORIGIN`` rule (release/runpath.py): the build's repair writes RUNPATHs by it, the audit's loader
check judges by it; the repair's output passes the loader check for every wheel shape; and no second
resolver of ``$ORIGIN`` appears in release/ (with a must-fail case: the repair's old private resolver)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from helpers.audit import contents, elf, lib
from helpers.rows import rows_by_id

from release import runpath
from release.audit.checks import loader
from release.audit.model import Expectation
from release.wheelbuild.repair.contract import Library, WheelFacts, decide, row_contract
from release.wheelbuild.repair.wheelfile import install_path

ROOT = Path(__file__).resolve().parents[2]
ROW = rows_by_id()["cu130-py312-x86_64"]
NEEDED = ("libcudart.so.13", "libc.so.6")
DATA = "pkg-0.1.0.data"

# (member, the search path the build left): every place a library sits in the wheels the tests build
SHAPES = [
    ("pkg/_ext.cpython-312-x86_64-linux-gnu.so", ()),  # at the top of the package
    ("pkg/ops/kernels/libk.so", ()),  # two folders deep
    ("pkg.libs/libk-1a2b3c4d.so", ()),  # auditwheel's .libs folder, beside the package
    ("_ext.cpython-312-x86_64-linux-gnu.so", ()),  # the site-packages root
    (f"{DATA}/platlib/pkg/lib/libk.so", ()),  # installed from .data/platlib
    ("pkg/ops/kernels/libk.so", ("/usr/local/cuda/lib64",)),  # the build machine's path: dropped
    ("pkg/lib/libk.so", ("$ORIGIN",)),  # its own folder: kept, the package's folder added
    ("pkg/lib/libk.so", ("$ORIGIN/../../nvidia/cu13/lib",)),  # already right: left alone
    ("pkg/libk.so", ("$ORIGIN/../../elsewhere",)),  # climbs out: kept as written, the package's added
    ("pkg/libk.so", ("",)),  # an empty entry: dropped
]


@pytest.mark.parametrize(("member", "current"), SHAPES)
def test_the_repairs_runpath_passes_the_loader_check(member: str, current: tuple[str, ...]) -> None:
    facts = WheelFacts(
        "pkg-0.1.0-cp312-cp312-manylinux_2_28_x86_64.whl",
        "pkg-0.1.0.dist-info",
        DATA,
        "Metadata-Version: 2.4\nName: pkg\nVersion: 0.1.0\n",
        (Library(member, install_path(member, DATA), NEEDED, current, (), True, True, False),),
    )
    fix = decide(facts, row_contract(ROW))
    written = dict(fix.runpaths).get(member, current)  # patchelf --set-rpath writes a RUNPATH
    found = loader.check(
        contents(lib(member, info=elf(needed=NEEDED, runpath=written))), Expectation.from_row(ROW)
    )
    assert [f.message for f in found if not f.ok] == [], (member, current, written)
    assert all(runpath.is_origin_entry(e) for e in written)


def test_the_rule() -> None:
    assert runpath.installed_dir("pkg-1.data/platlib/pkg/lib/libk.so") == "pkg/lib"
    assert runpath.installed_dir("pkg-1.data/scripts/tool") is None
    assert runpath.origin_entry("nvidia/cu13/lib", "pkg/lib") == "$ORIGIN/../../nvidia/cu13/lib"
    assert runpath.origin_entry("pkg", "pkg") == "$ORIGIN"
    assert runpath.origin_entry("nvidia/cu13/lib", "") == "$ORIGIN/nvidia/cu13/lib"
    assert runpath.climbs_out("$ORIGIN/../..", "pkg") and not runpath.climbs_out("$ORIGIN/..", "pkg")
    assert runpath.resolve("$ORIGIN/../..", "pkg") is None and runpath.resolve("$ORIGIN/..", "pkg") == ""
    assert runpath.runpath_for(("$ORIGIN/../nvidia/cu13/lib",), "pkg", ["nvidia/cu13/lib"]) is None
    assert runpath.runpath_for(("/opt/cuda", "$ORIGIN"), "pkg", ["nvidia/cu13/lib"]) == (
        "$ORIGIN",
        "$ORIGIN/../nvidia/cu13/lib",
    )


# --------------------------------------------------------------------------- the guard

RULE = "release/runpath.py"
# The loader's emulation (auditwheel's lddtree port) expands $ORIGIN into a real directory on disk to
# resolve libraries at run time: not the wheel's rule, which is about site-packages-relative folders.
ALLOWED = {"release/binary/ldd.py"}
TOKENS = {"$ORIGIN", "${ORIGIN}", "$ORIGIN/", "${ORIGIN}/"}


def origin_resolvers(source: str) -> list[str]:
    """What in ``source`` takes an ``$ORIGIN`` entry apart or builds one: a string that is the bare token
    (compared, sliced, prefixed, replaced), or a regular expression naming it. Messages that mention
    ``$ORIGIN`` in a sentence are not a resolver."""
    docstrings = set()
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in docstrings:
            continue
        text = node.value
        if text.strip() in TOKENS or ("ORIGIN" in text and ("\\$" in text or "\\{" in text)):
            found.append(f"line {node.lineno}: {text!r}")
    return found


def test_one_origin_resolver_in_release() -> None:
    offenders = {}
    for path in sorted((ROOT / "release").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == RULE or rel in ALLOWED:
            continue
        found = origin_resolvers(path.read_text(encoding="utf-8"))
        if found:
            offenders[rel] = found
    assert offenders == {}, f"resolve $ORIGIN through {RULE}, not a second rule: {offenders}"
    assert origin_resolvers((ROOT / RULE).read_text(encoding="utf-8")), "the guard must see the rule itself"


def test_the_guard_catches_a_second_resolver() -> None:
    """The repair's old private resolver, as it was before the rule was one."""
    old = """
def _origin_target(entry: str, lib_dir: str) -> str | None:
    entry = entry.replace("${ORIGIN}", "$ORIGIN")
    if entry != "$ORIGIN" and not entry.startswith("$ORIGIN/"):
        return None
    return posixpath.normpath(posixpath.join(lib_dir, entry[len("$ORIGIN") :].lstrip("/")))
"""
    assert len(origin_resolvers(old)) >= 3
    assert origin_resolvers('_ORIGIN = re.compile(r"^\\$(ORIGIN|\\{ORIGIN\\})(?=/|$)")')
    assert origin_resolvers('rel = "x"\nentry = f"$ORIGIN/{rel}"')
    assert not origin_resolvers('message = "use $ORIGIN-relative entries"')


def test_the_rule_imports_no_stage() -> None:
    tree = ast.parse((ROOT / RULE).read_text(encoding="utf-8"))
    imported = {
        n.module if isinstance(n, ast.ImportFrom) else a.name
        for n in ast.walk(tree)
        if isinstance(n, (ast.Import, ast.ImportFrom))
        for a in n.names
    }
    assert not {m for m in imported if m and m.startswith("release")}, imported
