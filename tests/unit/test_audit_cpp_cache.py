"""The C++ consumer check's cache (release.audit.cpp.cache): real wheels with a real SDK (headers and a
library gcc builds here), audited twice through ``audit_wheel``. A finding is read back only for the
same headers, libraries, claim and machine; anything else compiles again."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from helpers.elf import write_wheel

from release.audit.claim import claim_expectation
from release.audit.cpp import cache as cpp_cache
from release.audit.cpp import early as cpp_early
from release.audit.model import AuditResult, Finding, fail, ok
from release.audit.run import audit_wheel

C_API = '#pragma once\n#ifdef __cplusplus\nextern "C" {\n#endif\n%s\n#ifdef __cplusplus\n}\n#endif\n'
LIB = "int fx_version(void) { return 1; }\nint fx_a(void) { return 2; }\n"
HEADER = C_API % "int fx_version(void);\nint fx_a(void);"


def _lib(tmp: Path, source: str) -> bytes:
    tmp.mkdir(parents=True, exist_ok=True)
    src = tmp / "fx.c"
    src.write_text(source, encoding="utf-8")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", tmp / "libfx.so", src], check=True, timeout=120)
    return (tmp / "libfx.so").read_bytes()


def _wheel(tmp: Path, header: str = HEADER, lib: str = LIB) -> Path:
    files = {"fxsdk/include/fx.h": header.encode(), "fxsdk/lib/libfx.so": _lib(tmp, lib)}
    return write_wheel(tmp / "dist", "fxsdk", files)


def _audit(wheel: Path, cache: Path, *, remember: bool | None = True, train: str | None = None) -> Finding:
    expectation = claim_expectation(variant=None, gpu_archs=None, policy=None, runs_on="8.0")
    if train is not None:
        expectation = replace(expectation, train=train)
    result: AuditResult = audit_wheel(wheel, expectation, cache_dir=cache, remember=remember)
    found = [f for f in result.findings if f.check == "cpp_consumer"]
    assert len(found) == 1, found
    return found[0]


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many times the check ran for real (its findings not read back)."""
    calls: list[int] = []
    real = cpp_early.fresh_check

    def counted(*args: object, **kwargs: object) -> list[Finding]:
        calls.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(cpp_early, "fresh_check", counted)
    return calls


def test_the_same_wheel_again_reads_the_finding_back(tmp_path: Path, compiles: list[int]) -> None:
    wheel = _wheel(tmp_path)
    cache = tmp_path / "cache"
    first = _audit(wheel, cache)
    assert first.ok and "links fxsdk/lib/libfx.so" in first.message and "cached" not in first.details
    again = _audit(wheel, cache)
    assert compiles == [1]  # the second audit did not compile
    assert again.ok and again.message == first.message and again.details["cached"] is True
    assert len(list((cache / cpp_cache.FOLDER).glob("*/*.json"))) == 1


def test_off_by_env_or_argument(tmp_path: Path, compiles: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    wheel = _wheel(tmp_path)
    cache = tmp_path / "cache"
    monkeypatch.setenv(cpp_cache.CACHE_ENV, "0")
    _audit(wheel, cache, remember=None)
    _audit(wheel, cache, remember=None)
    assert compiles == [1, 1] and not (cache / cpp_cache.FOLDER).exists()
    monkeypatch.setenv(cpp_cache.CACHE_ENV, "1")
    _audit(wheel, cache, remember=None)  # kept
    _audit(wheel, cache, remember=False)  # --no-cache: compiles
    _audit(wheel, cache, remember=None)  # read back
    assert compiles == [1, 1, 1, 1]


@pytest.mark.parametrize("changed", ["header", "library", "train"])
def test_a_changed_input_compiles_again(tmp_path: Path, compiles: list[int], changed: str) -> None:
    """Must miss: a header one byte apart, a library rebuilt to fail the link, another CUDA train."""
    cache = tmp_path / "cache"
    _audit(_wheel(tmp_path / "a"), cache)
    if changed == "header":
        finding = _audit(_wheel(tmp_path / "b", header=HEADER + "int fx_b(void);\n"), cache)
        assert not finding.ok and "fx_b" in finding.message  # declared, not exported: the link fails
    elif changed == "library":
        finding = _audit(_wheel(tmp_path / "b", lib="int fx_version(void) { return 1; }\n"), cache)
        assert not finding.ok and "fx_a" in finding.message
    else:
        finding = _audit(_wheel(tmp_path / "b"), cache, train="12.8")
        assert finding.ok
    assert compiles == [1, 1] and "cached" not in finding.details


def test_a_changed_compiler_compiles_again(
    tmp_path: Path, compiles: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another g++ first on PATH (here a script running the same one: another file) is another machine."""
    wheel = _wheel(tmp_path)
    cache = tmp_path / "cache"
    _audit(wheel, cache)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    gxx = shutil.which("g++")
    assert gxx is not None
    (bin_dir / "g++").write_text(f'#!/bin/sh\nexec {gxx} "$@"\n', encoding="utf-8")
    (bin_dir / "g++").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    assert _audit(wheel, cache).ok
    assert compiles == [1, 1]


def test_a_failure_by_exit_code_is_kept_a_limit_hit_is_not(tmp_path: Path) -> None:
    key = cpp_cache.Keys("a" * 64, "b" * 64)
    folder = tmp_path / "c"
    assert not cpp_cache.store(folder, key, [fail("cpp_consumer", "stopped after 300 s")])
    assert cpp_cache.load(folder, key) is None
    assert not cpp_cache.store(folder, key, [fail("cpp_consumer", "cannot check", cannot_check=True)])
    assert not cpp_cache.store(folder, key, [])
    kept = fail("cpp_consumer", "does not link (exit code 1)", repeatable=True)
    assert cpp_cache.store(folder, key, [kept, ok("cpp_consumer", "fine")])
    back = cpp_cache.load(folder, key)
    assert back is not None and [f.ok for f in back] == [False, True] and back[0].message == kept.message


def test_a_failing_link_is_read_back_the_same(tmp_path: Path, compiles: list[int]) -> None:
    wheel = _wheel(tmp_path, header=HEADER + "int fx_missing(void);\n")
    cache = tmp_path / "cache"
    first = _audit(wheel, cache)
    assert not first.ok and "fx_missing" in first.message
    again = _audit(wheel, cache)
    assert not again.ok and again.message == first.message and again.details.get("cached") is True
    assert compiles == [1]


def test_a_corrupt_or_foreign_entry_is_not_read(tmp_path: Path, compiles: list[int]) -> None:
    wheel = _wheel(tmp_path)
    cache = tmp_path / "cache"
    _audit(wheel, cache)
    (entry,) = (cache / cpp_cache.FOLDER).glob("*/*.json")
    entry.write_text("{not json", encoding="utf-8")
    assert _audit(wheel, cache).ok
    data = json.loads(entry.read_text(encoding="utf-8"))  # written again, whole
    data["key"] = "0" * 64  # an entry that claims another key
    entry.write_text(json.dumps(data), encoding="utf-8")
    assert "cached" not in _audit(wheel, cache).details
    assert compiles == [1, 1, 1]


def test_only_the_newest_entries_per_sdk_are_kept(tmp_path: Path) -> None:
    folder = tmp_path / "c"
    for i in range(cpp_cache.KEEP + 3):
        assert cpp_cache.store(folder, cpp_cache.Keys("s" * 64, f"{i:064d}"), [ok("cpp_consumer", str(i))])
    assert len(list((folder / ("s" * 64)).glob("*.json"))) == cpp_cache.KEEP
    assert not list((folder / ("s" * 64)).glob(".tmp-*"))


def test_an_entry_past_its_size_cap_is_not_read(tmp_path: Path) -> None:
    key = cpp_cache.Keys("a" * 64, "b" * 64)
    assert cpp_cache.store(tmp_path, key, [ok("cpp_consumer", "fine")])
    entry = tmp_path / key.sdk / f"{key.whole}.json"
    assert cpp_cache.load(tmp_path, key) is not None
    data = json.loads(entry.read_text(encoding="utf-8"))
    data["findings"][0]["message"] = "x" * cpp_cache.ENTRY_BYTES  # valid JSON, but past the cap
    entry.write_text(json.dumps(data), encoding="utf-8")
    assert cpp_cache.load(tmp_path, key) is None


def test_a_wheel_without_an_sdk_has_no_key(tmp_path: Path) -> None:
    wheel = write_wheel(tmp_path / "dist", "plain", {"plain/__init__.py": b""})
    from release.audit.reading.archive import open_wheel

    with open_wheel(wheel) as opened:
        assert cpp_cache.keys(opened.members, None, {}) is None


def test_the_key_covers_the_checks_code_and_the_cuda_tables(tmp_path: Path) -> None:
    """A finding of other code, or of other CUDA header tables, is never read back."""
    release = Path(cpp_cache.__file__).resolve().parents[2]
    names = {p.relative_to(release).as_posix() for p in cpp_cache.code_files()}
    assert {"audit/cpp/consumer.py", "audit/cpp/tools.py", "audit/cpp/link.py"} <= names
    assert {"resources/cuda.toml", "resources/cuda_headers.py", "binary/elf_symbols.py"} <= names
    # the modules that choose the CUDA headers the SDK compiles with (missing from the old list)
    assert {"audit/checks/packages.py", "audit/standalone.py", "core/nvcc.py"} <= names
    copies = []
    for path in cpp_cache.code_files():
        copy = tmp_path / path.parent.name / path.name
        copy.parent.mkdir(exist_ok=True)
        copy.write_bytes(path.read_bytes())
        copies.append(copy)
    before = cpp_cache.digest_files(copies, "1")
    assert cpp_cache.digest_files(copies, "1") == before
    toml = tmp_path / "resources" / "cuda.toml"
    toml.write_bytes(toml.read_bytes() + b"\n# one more line\n")
    assert cpp_cache.digest_files(copies, "1") != before
    assert cpp_cache.digest_files(copies, "2") != cpp_cache.digest_files(copies, "1")


def _import_closure(start: tuple[str, ...], root: Path) -> set[Path]:
    """The release modules ``start`` imports, directly or not (every import statement, function-level
    ones too, read with ``ast``), and the package ``__init__`` files on the way."""
    seen: set[Path] = set()
    todo = list(start)
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # the packages on the way are imported too
            base = root.parent.joinpath(*parts[:i])
            for path in (base / "__init__.py", base.with_suffix(".py")):
                if path.is_file() and path not in seen:
                    seen.add(path)
                    package = ".".join(parts[:i]) if path.name == "__init__.py" else ".".join(parts[: i - 1])
                    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                        if isinstance(node, ast.Import):
                            todo += [a.name for a in node.names if a.name.startswith("release")]
                        elif isinstance(node, ast.ImportFrom):
                            module = node.module or ""
                            if node.level:
                                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                                module = ".".join([*up, module] if module else up)
                            if module.startswith("release"):
                                todo += [module, *(f"{module}.{a.name}" for a in node.names)]
    return seen


def test_touching_any_module_the_check_imports_changes_the_key(tmp_path: Path) -> None:
    """The key hashes all of release/ (a superset, documented in release.audit.cpp.cache): every module
    of the check's import closure, computed here from its import statements, is in it, and a change to
    any one of them, or to the CUDA tables it reads, gives a new key."""
    release = Path(cpp_cache.__file__).resolve().parents[2]
    closure = _import_closure(
        ("release.audit.cpp.early", "release.audit.cpp.consumer", "release.audit.cpp.cache"), release
    )
    assert release / "core" / "nvcc.py" in closure and release / "audit" / "checks" / "packages.py" in closure
    assert len(closure) > 20
    files = cpp_cache.code_files()
    assert closure <= set(files), sorted(str(p) for p in closure - set(files))
    copies = {}
    for path in files:
        copy = tmp_path / path.relative_to(release.parent)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(path.read_bytes())
        copies[path] = copy
    before = cpp_cache.digest_files(copies.values(), "1")
    for path in [*sorted(closure), release / "resources" / "cuda.toml"]:
        copy = copies[path]
        data = copy.read_bytes()
        copy.write_bytes(data + b"\n# touched\n")
        assert cpp_cache.digest_files(copies.values(), "1") != before, path
        copy.write_bytes(data)
    assert cpp_cache.digest_files(copies.values(), "1") == before
