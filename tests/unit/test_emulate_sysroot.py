"""release.emulate.sysroot's pure checks: a missing library named with the file that needs it, a root
that would hide host paths from qemu-user, a manifest of another recipe."""

from __future__ import annotations

from pathlib import Path

from release.emulate.recipes import LAYOUT_VERSION, load
from release.emulate.sysroot import layout_problem, manifest_problem, missing_libraries, sysroot_folder


def test_missing_libraries_names_each_file_and_soname() -> None:
    needs = {"usr/bin/python3.11": ("libc.so.6", "libz.so.1"), "lib-dynload/_ssl.so": ("libssl.so.3",)}
    assert missing_libraries(needs, ["libc.so.6", "libz.so.1", "libssl.so.3"]) == {}
    assert missing_libraries(needs, ["libc.so.6"]) == {
        "lib-dynload/_ssl.so": ["libssl.so.3"],
        "usr/bin/python3.11": ["libz.so.1"],
    }


def test_a_root_holding_tmp_would_hide_the_hosts() -> None:
    assert layout_problem(["usr", "etc", "lib", "bin", "sbin"]) is None
    problem = layout_problem(["usr", "tmp", "home"])
    assert problem is not None and "/home, /tmp" in problem and "qemu-user" in problem


def test_manifest_of_another_recipe_or_layout_is_not_ready() -> None:
    recipe = load().for_python("3.11", "aarch64")
    good = {
        "layout": LAYOUT_VERSION,
        "key": recipe.key(),
        "recipe": recipe.to_json(),
        "python_version": "3.11.2",
    }
    assert manifest_problem(good, recipe) is None
    assert manifest_problem({**good, "layout": 0}, recipe) == f"layout 0 is not the current {LAYOUT_VERSION}"
    other = load().for_python("3.13", "aarch64")
    assert manifest_problem(good, other) == "it was made from another recipe"
    assert manifest_problem([], recipe) == "its manifest is not a JSON object"
    assert (
        manifest_problem({**good, "python_version": None}, recipe)
        == "its manifest names no interpreter version"
    )


def test_the_folder_is_named_by_the_recipe() -> None:
    recipe = load().for_python("3.13", "aarch64")
    assert sysroot_folder(Path("/c"), recipe) == Path(f"/c/emulate/python3.13-aarch64-trixie-{recipe.key()}")
