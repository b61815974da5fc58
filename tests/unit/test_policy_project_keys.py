"""The [project] keys a real package needs, checked at load: an optional check, a tolerance,
the form of its wheel tags, build constraints files; project.path relative to the policy file
and holding a Python project; a matrix narrowed to one arch leaving the other arch's keys unused, not wrong. And the record
store's one rule "is this wheel the row's?" for abi3 and py3-none wheels.

Each policy here is examples/lazysaxpy/rows.toml (x86_64, Python 3.12, CPU + CUDA 13.0 and
13.2) with one change, parsed for real from TOML, as if read from a folder holding a stand-in
Python project (lazysaxpy's project.path is ".").
"""

from __future__ import annotations

import copy
import math
import tomllib
from pathlib import Path
from typing import Any

import pytest
from helpers.policy import stub_project

from release.core.errors import InputError, PolicyError, SelectionError
from release.policy.load import load_policy, parse_policy
from release.policy.matrix import Row, expand, select
from release.policy.model import Policy
from release.policy.versions import python_tag_matches
from release.records import row_for_wheel, row_matches_wheel
from release.wheelbuild.repair.contract import channels_for

ROOT = Path(__file__).resolve().parents[2]
LAZY = ROOT / "examples" / "lazysaxpy" / "rows.toml"
BASE: dict[str, Any] = tomllib.loads(LAZY.read_text(encoding="utf-8"))
SHA = "0" * 64


def _load(folder: Path, change: dict[str, Any] | None = None, **project: object) -> Policy:
    """The lazysaxpy policy with ``project`` keys set (None deletes) and ``change`` merged on top,
    parsed as if read from ``folder/rows.toml``, ``folder`` holding a stand-in Python project."""
    stub_project(folder)
    data = copy.deepcopy(BASE)
    for key, value in project.items():
        if value is None:
            data["project"].pop(key, None)
        else:
            data["project"][key] = value
    for key, value in (change or {}).items():
        data[key] = value
    return parse_policy(data, "rows.toml", source=folder / "rows.toml", sha256=SHA)


def _refusal(folder: Path, change: dict[str, Any] | None = None, **project: object) -> str:
    with pytest.raises(PolicyError) as info:
        _load(folder, change, **project)
    message = str(info.value)
    assert message.startswith("rows.toml: "), message
    return message


# --------------------------------------------------------------------------- check and tolerance


def test_check_is_optional(tmp_path: Path) -> None:
    policy = _load(tmp_path, check=None)
    assert policy.project.check is None
    assert policy.project.exact
    assert _load(tmp_path).project.check == "lazysaxpy:check"


def test_tolerances_load_as_floats_and_default_to_exact(tmp_path: Path) -> None:
    project = _load(tmp_path, atol=1e-6, rtol=0).project
    assert (project.atol, project.rtol, project.exact) == (1e-6, 0.0, False)
    assert _load(tmp_path, rtol=2).project.rtol == 2.0
    assert _load(tmp_path).project.exact


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("atol", -1e-6, "must be a finite number, 0 or more"),
        ("rtol", math.nan, "must be a finite number, 0 or more"),
        ("atol", math.inf, "must be a finite number, 0 or more"),
        ("atol", 10**400, "must be a finite number, 0 or more"),
        ("rtol", True, "expected a number like 1e-6, got a boolean"),
        ("atol", "1e-6", "expected a number like 1e-6, got a string"),
    ],
)
def test_bad_tolerances_are_refused(tmp_path: Path, key: str, value: object, fragment: str) -> None:
    message = _refusal(tmp_path, None, **{key: value})
    assert f"project.{key}: " in message and fragment in message


def test_a_tolerance_without_a_check_is_refused(tmp_path: Path) -> None:
    message = _refusal(tmp_path, check=None, atol=1e-6)
    assert "project.atol: a tolerance needs a check to apply to; set project.check" in message


# --------------------------------------------------------------------------- wheel tags


def test_wheel_tags_default_and_reach_every_row(tmp_path: Path) -> None:
    assert {r.wheel_tags for r in expand(_load(tmp_path, wheel_tags=None))} == {"cpython"}
    rows = expand(_load(tmp_path, wheel_tags="py3-none"))
    assert {r.wheel_tags for r in rows} == {"py3-none"}


def test_an_unknown_wheel_tags_form_is_refused_with_a_suggestion(tmp_path: Path) -> None:
    message = _refusal(tmp_path, wheel_tags="abi4")
    assert "project.wheel_tags: 'abi4' is not allowed; did you mean 'abi3'?" in message
    assert "cpython, abi3, py3-none" in message


def test_abi3_and_py3_none_build_once_per_variant_and_smoke_on_every_python(tmp_path: Path) -> None:
    """One abi3/py3-none wheel serves every Python: one row per variant, built with the oldest
    Python (an abi3 tag names the oldest CPython it serves), smoke-tested on each; the ids of the
    Pythons it serves still select it (``build cu130-py312``)."""
    three = {"matrix": {**BASE["matrix"], "pythons": ["3.12", "3.10", "3.11"]}}
    for tags in ("abi3", "py3-none"):
        rows = expand(_load(tmp_path, three, wheel_tags=tags))
        assert [r.id for r in rows] == ["cpu-py310-x86_64", "cu130-py310-x86_64", "cu132-py310-x86_64"]
        assert {r.pythons for r in rows} == {("3.10", "3.11", "3.12")}
        cu130 = rows[1]
        assert cu130.aliases == ("cu130-py311-x86_64", "cu130-py312-x86_64")
        assert cu130.to_json()["smoke_pythons"] == ["3.10", "3.11", "3.12"]
        policy = _load(tmp_path, three, wheel_tags=tags)
        assert select(policy, rows, patterns=("cu130-py312",)) == (cu130,)
        assert select(policy, rows, patterns=("cu130-py312-x86_64",)) == (cu130,)
        assert select(policy, rows, patterns=("*-py311-*",)) == rows
    # a cpython project builds (and smoke-tests) a wheel per Python, as before
    rows = expand(_load(tmp_path, three, wheel_tags="cpython"))
    assert len(rows) == 9 and all(r.pythons == (r.python,) and r.aliases == () for r in rows)
    with pytest.raises(SelectionError, match="no row matches 'cu130-py39'"):
        select(_load(tmp_path, three, wheel_tags="abi3"), rows, patterns=("cu130-py39",))


# --------------------------------------------------------------------------- build constraints


def test_build_constraints_are_relative_to_the_policy_and_must_exist(tmp_path: Path) -> None:
    (tmp_path / "ci").mkdir()
    (tmp_path / "ci" / "project.txt").write_text("cmake==4.4.4\n", encoding="utf-8")
    (tmp_path / "cu13.txt").write_text("ninja==1.13.2\n", encoding="utf-8")
    trains = copy.deepcopy(BASE["train"])
    trains["13.0"]["build_constraints"] = ["cu13.txt"]
    policy = _load(tmp_path, {"train": trains}, build_constraints=["ci/project.txt"])
    assert policy.project.build_constraints == (tmp_path / "ci" / "project.txt",)
    assert policy.build_constraints("13.0") == (tmp_path / "ci" / "project.txt", tmp_path / "cu13.txt")
    assert policy.build_constraints("13.2") == (tmp_path / "ci" / "project.txt",)
    assert policy.build_constraints(None) == (tmp_path / "ci" / "project.txt",)


def test_missing_absolute_and_folder_constraints_are_refused(tmp_path: Path) -> None:
    message = _refusal(tmp_path, build_constraints=["nope.txt"])
    assert f"project.build_constraints[0]: 'nope.txt' ({tmp_path / 'nope.txt'}) does not exist" in message
    assert "relative to the policy file's folder" in message
    message = _refusal(tmp_path, build_constraints=[str(tmp_path / "x.txt")])
    assert "must be relative to the policy file's folder" in message
    (tmp_path / "folder").mkdir()
    message = _refusal(tmp_path, build_constraints=["folder"])
    assert "is not a regular file" in message
    trains = copy.deepcopy(BASE["train"])
    trains["13.2"]["build_constraints"] = ["gone.txt"]
    message = _refusal(tmp_path, {"train": trains})
    assert "train.\"13.2\".build_constraints[0]: 'gone.txt'" in message


def test_constraints_from_a_real_file_resolve_against_its_folder(tmp_path: Path) -> None:
    """load_policy, not parse_policy: the folder is the policy file's, not the working directory's."""
    (tmp_path / "pins.txt").write_text("scikit-build-core==1.1.2\n", encoding="utf-8")
    text = LAZY.read_text(encoding="utf-8").replace(
        'wheel_tags = "py3-none"', 'wheel_tags = "py3-none"\nbuild_constraints = ["pins.txt"]'
    )
    (tmp_path / "rows.toml").write_text(text, encoding="utf-8")
    stub_project(tmp_path)
    assert load_policy(tmp_path / "rows.toml").project.build_constraints == (tmp_path / "pins.txt",)


# --------------------------------------------------------------------------- project.path


def test_project_path_is_relative_to_the_policy_file(tmp_path: Path) -> None:
    policy_folder = tmp_path / "ci"
    stub_project(tmp_path, "pkg")
    stub_project(tmp_path)
    assert _load(policy_folder, path="..").project.path == ".."
    assert _load(policy_folder, path="../pkg").project.path == "../pkg"
    message = _refusal(tmp_path, path="/abs/pkg")
    assert "project.path: '/abs/pkg' must be relative to the policy file's folder" in message
    assert (LAZY.parent / load_policy(LAZY).project.path).resolve() == LAZY.parent


def test_a_project_path_that_is_no_python_project_is_refused(tmp_path: Path) -> None:
    """Must fail: a folder that does not exist, a file, and a folder with neither a pyproject.toml
    nor a setup.py are refused at load, naming the file, the key, the folder and how to fix it."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "setup.cfg").write_text("[metadata]\nname = x\n", encoding="utf-8")
    (tmp_path / "notes.txt").write_text("not a folder\n", encoding="utf-8")
    fix = (
        "set project.path to the folder that holds the package's pyproject.toml (or setup.py), "
        f"relative to the policy file's folder ({tmp_path.resolve()}); '.' is that folder"
    )
    for path, what in (
        ("src/gone", "does not exist"),
        ("notes.txt", "is not a folder"),
        ("empty", "holds no Python project (no pyproject.toml and no setup.py)"),
    ):
        message = _refusal(tmp_path, path=path)
        assert message == f"rows.toml: project.path: {path!r} ({tmp_path.resolve() / path}) {what}; {fix}"
    with pytest.raises(PolicyError) as info:  # through the real file: the message names it as given
        load_policy(_write(tmp_path / "ci", path="../src/gone"))
    assert str(info.value).startswith(f"{tmp_path / 'ci' / 'rows.toml'}: project.path: '../src/gone' (")
    assert info.value.return_code == 2


def test_a_python_project_in_project_path_loads(tmp_path: Path) -> None:
    """Must pass: a folder holding a pyproject.toml, or only a setup.py, resolved against the
    policy file's folder with symlinks followed, as the build resolves it."""
    real = tmp_path / "real"
    stub_project(real, "pkg")
    (tmp_path / "legacy").mkdir()
    (tmp_path / "legacy" / "setup.py").write_text("from setuptools import setup\nsetup()\n", encoding="utf-8")
    assert _load(tmp_path, path="legacy").project.path == "legacy"
    # the policy file is a symlink into real/: "pkg" is found beside the file it points to
    (tmp_path / "link").mkdir()
    target = _write(real, path="pkg")
    (tmp_path / "link" / "rows.toml").symlink_to(target)
    assert load_policy(tmp_path / "link" / "rows.toml").project.path == "pkg"
    assert load_policy(LAZY).project.path == "."


def _write(folder: Path, **project: str) -> Path:
    """lazysaxpy's rows.toml with ``project`` keys replaced, written to ``folder/rows.toml``."""
    text = LAZY.read_text(encoding="utf-8")
    for key, value in project.items():
        line = next(line for line in text.splitlines() if line.startswith(f"{key} = "))
        text = text.replace(line, f'{key} = "{value}"')
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rows.toml").write_text(text, encoding="utf-8")
    return folder / "rows.toml"


# --------------------------------------------------------------------------- a narrowed matrix


def _two_arch_trains() -> dict[str, Any]:
    trains: dict[str, Any] = copy.deepcopy(BASE["train"])
    for version, table in trains.items():
        table["builder_image"]["aarch64"] = f"pytorch/manylinuxaarch64-builder:cuda{version}"
        table["gpu_archs"]["aarch64"] = ["9.0", "10.0", "11.0+PTX"]
    return trains


def test_other_arch_keys_are_unused_not_wrong(tmp_path: Path) -> None:
    deps = [{"package": "torch", "index": "pypi", "platforms": ["aarch64"]}]
    policy = _load(tmp_path, {"train": _two_arch_trains(), "dependency": deps})
    assert policy.platforms == ("x86_64",)
    assert {r.platform for r in expand(policy)} == {"x86_64"}
    assert policy.notes == (
        'rows.toml: train."13.0".builder_image: aarch64 not in matrix.platforms (x86_64): unused by this matrix',
        'rows.toml: train."13.0".gpu_archs: aarch64 not in matrix.platforms (x86_64): unused by this matrix',
        'rows.toml: train."13.2".builder_image: aarch64 not in matrix.platforms (x86_64): unused by this matrix',
        'rows.toml: train."13.2".gpu_archs: aarch64 not in matrix.platforms (x86_64): unused by this matrix',
        "rows.toml: dependency[0].platforms[0]: aarch64 is not in matrix.platforms (x86_64); unused by this matrix",
    )
    assert policy.dependencies[0].platforms == ("aarch64",)  # kept: it still matches no x86_64 row
    assert _load(tmp_path).notes == ()


def test_a_name_that_is_no_arch_is_still_refused(tmp_path: Path) -> None:
    trains = _two_arch_trains()
    trains["13.0"]["gpu_archs"]["x86-64"] = ["8.0+PTX"]
    message = _refusal(tmp_path, {"train": trains})
    assert "train.\"13.0\".gpu_archs.x86-64: unknown platform 'x86-64'; did you mean 'x86_64'?" in message
    trains = _two_arch_trains()
    trains["13.2"]["builder_image"]["arm64"] = "img"
    message = _refusal(tmp_path, {"train": trains})
    assert "train.\"13.2\".builder_image.arm64: unknown platform 'arm64'" in message
    deps = [{"package": "torch", "index": "pypi", "platforms": ["arm64"]}]
    assert "dependency[0].platforms[0]: 'arm64' is not in matrix.platforms" in _refusal(
        tmp_path, {"dependency": deps}
    )


def test_a_matrix_arch_still_needs_its_image_and_arch_list(tmp_path: Path) -> None:
    trains = _two_arch_trains()
    del trains["13.0"]["builder_image"]["x86_64"]
    message = _refusal(tmp_path, {"train": trains})
    assert "train.\"13.0\".builder_image.x86_64: missing required key 'x86_64'" in message
    trains = _two_arch_trains()
    del trains["13.2"]["gpu_archs"]["x86_64"]
    message = _refusal(tmp_path, {"train": trains})
    assert 'train."13.2".gpu_archs.x86_64: CUDA 13.2 on x86_64 has no arch list' in message


# --------------------------------------------------------------------------- which row a wheel is


def _rows(tmp_path: Path, wheel_tags: str, python: str = "3.12") -> dict[str, Row]:
    matrix = {**BASE["matrix"], "pythons": [python]}
    return {r.variant: r for r in expand(_load(tmp_path, {"matrix": matrix}, wheel_tags=wheel_tags))}


@pytest.mark.parametrize(
    ("wheel_tags", "python", "tag", "matches"),
    [
        ("py3-none", "3.12", "py3-none", True),
        ("py3-none", "3.12", "py312-none", True),
        ("py3-none", "3.11", "py312-none", False),  # for a newer Python than the row's
        ("py3-none", "3.12", "cp312-cp312", False),  # a form the policy does not name
        ("py3-none", "3.12", "py3-abi3", False),
        ("abi3", "3.11", "cp310-abi3", True),
        ("abi3", "3.11", "cp311-abi3", True),
        ("abi3", "3.11", "cp312-abi3", False),  # needs 3.12, the row is 3.11
        ("abi3", "3.11", "cp311-cp311", False),
        ("abi3", "3.11", "py3-none", False),
        ("cpython", "3.12", "cp312-cp312", True),
        ("cpython", "3.12", "cp310-abi3", False),
        ("cpython", "3.12", "py3-none", False),
    ],
)
def test_row_matches_the_wheel_tags_the_policy_names(
    tmp_path: Path, wheel_tags: str, python: str, tag: str, matches: bool
) -> None:
    row = _rows(tmp_path, wheel_tags, python)["cu130"]
    assert row_matches_wheel(row, f"lazysaxpy-0.1.0+cu130-{tag}-manylinux_2_28_x86_64.whl") is matches
    # the label and the CPU arch still decide too
    assert not row_matches_wheel(row, f"lazysaxpy-0.1.0+cu132-{tag}-manylinux_2_28_x86_64.whl")
    assert not row_matches_wheel(row, f"lazysaxpy-0.1.0+cu130-{tag}-manylinux_2_28_aarch64.whl")


def test_python_tag_matches_is_strict_about_spelling() -> None:
    assert python_tag_matches("abi3", "3.12", "cp39", "abi3") is True  # 3.9 and newer: 3.12 too
    assert python_tag_matches("abi3", "3.9", "cp310", "abi3") is False
    assert python_tag_matches("abi3", "3.12", "cp3", "abi3") is False
    assert python_tag_matches("abi3", "3.12", "cp3１", "abi3") is False  # a fullwidth digit
    assert python_tag_matches("py3-none", "3.12", "py2", "none") is False
    assert python_tag_matches("py3-none", "3.12", "py3", "abi3") is False


def test_row_for_wheel_finds_a_py3_none_wheel_and_says_the_forms(tmp_path: Path) -> None:
    rows = tuple(_rows(tmp_path, "py3-none").values())
    found = row_for_wheel("lazysaxpy-0.1.0+cu132-py3-none-manylinux_2_28_x86_64.whl", rows, policy_path="p")
    assert found.id == "cu132-py312-x86_64"
    with pytest.raises(InputError) as info:
        row_for_wheel("lazysaxpy-0.1.0+cu132-cp312-cp312-manylinux_2_28_x86_64.whl", rows, policy_path="p")
    assert "cu132-py312-x86_64: py3-none" in str(info.value)


# --------------------------------------------------------------------------- libraries a dependency provides


def test_dependency_libraries_reach_the_rows_they_apply_to(tmp_path: Path) -> None:
    deps = [
        {
            "package": "torch",
            "index": "pypi",
            "variants": ["cu130"],
            "libraries": ["libc10.so", "libtorch_cpu.so"],
        },
        {"package": "other", "index": "pypi", "libraries": ["libother.so.1", "libc10.so"]},
    ]
    rows = {r.variant: r for r in expand(_load(tmp_path, {"dependency": deps}))}
    assert rows["cu130"].provided_libraries == ("libc10.so", "libtorch_cpu.so", "libother.so.1")
    assert rows["cu132"].provided_libraries == ("libother.so.1", "libc10.so")
    assert rows["cpu"].provided_libraries == ("libother.so.1", "libc10.so")  # no variants: every row
    assert all(r.provided_libraries == () for r in expand(_load(tmp_path)))
    # the channels of a CUDA row: the same rule as the build's contract; a CPU row has none
    assert (rows["cu130"].channels, rows["cu132"].channels, rows["cpu"].channels) == (
        ("torch", "other"),
        ("other",),
        (),
    )
    policy = _load(tmp_path, {"dependency": deps})
    assert all(r.channels == channels_for(r, policy.dependencies) for r in expand(policy))


@pytest.mark.parametrize("bad", ["c10", "libc10.dll", "/usr/lib/libc10.so", "libc10.so "])
def test_a_dependency_library_must_be_a_soname(tmp_path: Path, bad: str) -> None:
    deps = [{"package": "torch", "index": "pypi", "libraries": [bad]}]
    assert "dependency[0].libraries[0]: " in _refusal(tmp_path, {"dependency": deps})


def test_plan_says_which_keys_the_matrix_does_not_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from release.cli import main

    text = LAZY.read_text(encoding="utf-8").replace(
        'gpu_archs.x86_64 = ["7.5"',
        'gpu_archs.aarch64 = ["9.0", "10.0", "11.0+PTX"]\ngpu_archs.x86_64 = ["7.5"',
    )
    assert text.count("gpu_archs.aarch64") == 2
    (tmp_path / "rows.toml").write_text(text, encoding="utf-8")
    stub_project(tmp_path)
    assert main(["plan", "--policy", str(tmp_path / "rows.toml")]) == 0
    out, err = capsys.readouterr()
    assert "3 rows: 2 CUDA, 1 CPU" in out and "aarch64" not in out
    assert (
        'note: rows.toml: train."13.0".gpu_archs: aarch64 not in matrix.platforms (x86_64)' not in err
    )  # full path
    assert (
        f'note: {tmp_path / "rows.toml"}: train."13.0".gpu_archs: aarch64 not in matrix.platforms (x86_64): unused'
        in err
    )
