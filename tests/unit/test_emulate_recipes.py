"""release.emulate.recipes: the emulated interpreters' recipes, validated on load (pure), and the
reason a Python that no reachable source has is refused."""

from __future__ import annotations

import copy
import tomllib
from typing import Any

import pytest

from release.core.errors import ToolError
from release.emulate.recipes import RECIPES_FILE, load, parse


def _data() -> dict[str, Any]:
    return tomllib.loads(RECIPES_FILE.read_text(encoding="utf-8"))


def test_the_file_gives_3_11_from_bookworm_and_3_13_from_trixie() -> None:
    recipes = load()
    assert recipes.for_python("3.11", "aarch64").suite == "bookworm"
    assert recipes.for_python("3.13", "aarch64").suite == "trixie"
    for version in ("3.11", "3.13"):
        packages = recipes.for_python(version, "aarch64").packages
        assert {f"python{version}-venv", "python3-pip-whl", "libc6", "libstdc++6"} <= set(packages)


@pytest.mark.parametrize("version", ["3.10", "3.12"])
def test_a_python_no_source_has_is_refused_saying_why(version: str) -> None:
    with pytest.raises(ToolError) as exc:
        load().for_python(version, "aarch64")
    text = str(exc.value)
    assert text.startswith(
        f"no aarch64 CPython {version} reachable here: Debian has no python{version} for arm64"
    )
    assert "PyPI carries no CPython interpreter" in text


def test_a_python_with_no_recipe_nor_reason_is_refused() -> None:
    with pytest.raises(
        ToolError, match=r"no aarch64 CPython 3.9 reachable here: sysroots.toml has no recipe"
    ):
        load().for_python("3.9", "aarch64")


def test_the_key_follows_the_package_set_and_nothing_else() -> None:
    data = _data()
    a = parse(data).for_python("3.11", "aarch64")
    more = copy.deepcopy(data)
    more["python"]["3.11"]["packages"].append("libzstd1")
    b = parse(more).for_python("3.11", "aarch64")
    assert a.key() != b.key() and a.name.startswith("python3.11-aarch64-bookworm-")
    shuffled = copy.deepcopy(data)
    shuffled["python"]["3.11"]["packages"].reverse()
    assert parse(shuffled).for_python("3.11", "aarch64").key() == a.key()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d.__setitem__("schema_version", 2), "schema_version: 2, this wheelwright reads 1"),
        (lambda d: d.__setitem__("pythons", []), "pythons: unknown key"),
        (lambda d: d["python"]["3.11"].__setitem__("suites", "x"), "unknown key 'suites'"),
        (lambda d: d["python"]["3.11"].__setitem__("arch", "arm64"), "'arm64' is not one of"),
        (
            lambda d: d["python"]["3.11"]["packages"].append("Bad Name"),
            "'Bad Name' is not a Debian package name",
        ),
        (lambda d: d["python"]["3.11"]["packages"].append("libc6"), "a package is listed twice"),
        (
            lambda d: d["python"]["3.11"]["packages"].remove("python3.11"),
            "python3.11 itself is not in the set",
        ),
        (lambda d: d["unavailable"]["pythons"].append("3.11"), "3.11 also has a recipe"),
    ],
)
def test_a_bad_file_fails_naming_the_key(edit: Any, message: str) -> None:
    data = _data()
    edit(data)
    with pytest.raises(
        ToolError, match="sysroots.toml: .*" + message.replace("(", r"\(").replace(".", r"\.")
    ):
        parse(data)


def test_emulation_problem_is_cheap_and_says_why() -> None:
    from release.emulate import binfmt
    from release.emulate.python import emulation_problem
    from release.resources.cpus import host_arch

    assert emulation_problem("3.10", host_arch()) is None  # this machine's own CPU
    if host_arch() == "aarch64" or not binfmt.capability("aarch64").runs:
        pytest.skip("needs an x86_64 machine with qemu-aarch64 registered")
    assert emulation_problem("3.11", "aarch64") is None
    problem = emulation_problem("3.12", "aarch64")
    assert problem is not None and problem.startswith("no aarch64 CPython 3.12 reachable here")
