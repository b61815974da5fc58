"""The stand-in builder image (scripts/make_builder_image.py, builder/).

The recipe, key and parsing tests need nothing. The image tests need a container engine
(podman with builder/containers.conf, or docker): where none works they are skipped, saying
why; everywhere else the image is made once per recipe hash (about 4.5 minutes cold as root
on a 2-core machine: debootstrap, the Pythons, the CUDA toolchain, tar and import; a few
seconds when present) and checked from inside a container.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import time
from pathlib import Path

import make_builder_image as mbi
import pytest
from fetch_cuda12_debian import parse_deb822_sources, parse_one_line_sources
from helpers.policy import link_examples
from helpers.rows import rows_by_id
from helpers.text import edited

from builder import recipe as recipes
from release.core.errors import InputError, ToolError, WheelwrightError
from release.core.proc import run
from release.policy.load import load_policy
from release.policy.matrix import expand
from release.wheelbuild.engine import detect_engine

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RECIPE_TEXT = (ROOT / "builder" / "recipe.toml").read_text(encoding="utf-8")
ENV = mbi.engine_env(os.environ)
PROBE = detect_engine(ENV)
needs_engine = pytest.mark.skipif(
    PROBE.engine is None, reason=f"no container engine works here ({PROBE.explain()})"
)


# --------------------------------------------------------------------------- the recipe


def test_the_recipe_file_parses() -> None:
    recipe = recipes.parse_recipe(RECIPE_TEXT, "recipe.toml")
    assert recipe.name == "localhost/wheelwright-standin-builder"
    assert "g++" in recipe.debian_packages and recipe.helper_python == "3.9"
    assert "auditwheel==6.8.2" in recipe.tool_pins


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("pythons = ", "python = "), "unknown key 'python'; did you mean 'pythons'?"),
        (('"build==1.6.1"', '"build>=1.6"'), "python_pins[1]: 'build>=1.6' is not an exact pin"),
        (('"build==1.6.1"', '"build==1.*"'), "is not an exact pin"),
        (('"3.12"', '"3.twelve"'), "Python '3.twelve' is not of the form 3.X"),
        (('name = "localhost/wheelwright-standin-builder"', ""), "missing name"),
        (("recipe_version = 1", "recipe_version = 2"), "recipe_version must be 1"),
        (("localhost/wheelwright-standin-builder", "localhost/Standin:latest"), "is not an image name"),
        (('debian_packages = ["g++", "make"]', "debian_packages = []"), "debian_packages must be"),
    ],
)
def test_a_bad_recipe_fails_naming_the_key(edit: tuple[str, str], message: str) -> None:
    with pytest.raises(InputError, match=r"recipe\.toml: ") as exc:
        recipes.parse_recipe(edited(RECIPE_TEXT, edit), "recipe.toml")
    assert message in str(exc.value)


def test_pins_follow_their_markers() -> None:
    recipe = recipes.parse_recipe(RECIPE_TEXT, "recipe.toml")
    assert "tomli==2.5.0" in recipes.pins_for(recipe.python_pins, "3.10")
    assert not any(p.startswith("tomli") for p in recipes.pins_for(recipe.python_pins, "3.11"))


def _inputs(**changes: object) -> recipes.Inputs:
    recipe = recipes.parse_recipe(RECIPE_TEXT, "recipe.toml")
    base = recipes.Inputs(
        recipe=recipe,
        code_sha256="0" * 64,
        train="13.0",
        toolchain=("nvidia-cuda-nvcc==13.0.88", "nvidia-cuda-runtime==13.0.96"),
        manylinux="manylinux_2_28",
        platform="x86_64",
        dpkg_arch="amd64",
        suite="bookworm",
        packages=("g++", "libssl3"),
        pythons=(recipes.PythonSource("3.12.1", "3.12.1 (main) [GCC 12.2.0]", Path("/p/3.12.1")),),
        helper=None,
        ca_bundle_sha256=None,
        mirror="http://mirror.example/debian",
        keyring=None,
        ca_bundle=None,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_the_key_covers_what_decides_the_contents_and_nothing_else() -> None:
    base = _inputs()
    assert base.key == _inputs().key
    assert base.tag == f"localhost/wheelwright-standin-builder:cuda13.0-{base.key[:12]}"
    assert base.full_version == "13.0.88"
    recipe = dataclasses.replace(base.recipe, tool_pins=("auditwheel==6.8.1",))
    changed = [
        _inputs(toolchain=("nvidia-cuda-nvcc==13.0.89",)),
        _inputs(recipe=recipe),
        _inputs(code_sha256="1" * 64),
        _inputs(packages=("g++",)),
        _inputs(suite="trixie"),
        _inputs(ca_bundle_sha256="ab" * 32),
        _inputs(pythons=(recipes.PythonSource("3.12.2", "3.12.2 (main)", Path("/p/3.12.1")),)),
        _inputs(helper=recipes.PythonSource("3.9.18", "3.9.18 (main)", Path("/p/3.9.18"))),
    ]
    assert len({c.key for c in changed} | {base.key}) == len(changed) + 1
    # where things come from is recorded, not keyed: the same contents from another mirror
    same = _inputs(mirror="http://other.example/debian", ca_bundle="/elsewhere.crt")
    assert same.key == base.key
    assert (
        _inputs(pythons=(recipes.PythonSource("3.12.1", "3.12.1 (main) [GCC 12.2.0]", Path("/x")),)).key
        == base.key
    )


def test_another_cpus_image_is_keyed_and_named_by_its_cpu() -> None:
    """The arm64 stand-in (made on x86_64 under emulation) is another image: its own key and a tag
    naming its CPU, so neither replaces the other (the x86_64 tag keeps its form)."""
    base = _inputs()
    arm = _inputs(platform="aarch64", dpkg_arch="arm64")
    assert arm.key != base.key
    assert arm.tag == f"localhost/wheelwright-standin-builder:cuda13.0-aarch64-{arm.key[:12]}"
    assert base.tag_stem == f"cuda13.0-{base.key[:12]}"


def test_a_new_recipe_replaces_only_its_own_cpus_older_stand_ins() -> None:
    """A new recipe removes the train's older stand-ins of its own CPU, never the other CPU's (the
    x86_64 and arm64 stand-ins of a train live side by side), nor another train's."""
    x86, arm = _inputs(), _inputs(platform="aarch64", dpkg_arch="arm64")
    base = "wheelwright-standin-builder"
    cached = [
        f"{base}-{x86.tag_stem}",  # x86_64, this recipe
        f"{base}-cuda13.0-0123456789ab",  # x86_64, an older recipe: goes
        f"{base}-{arm.tag_stem}",  # arm64, this recipe
        f"{base}-cuda13.0-aarch64-ba9876543210",  # arm64, an older recipe
        f"{base}-cuda13.2-0123456789ab",  # another train
    ]
    assert recipes.other_recipes(x86, cached) == (
        "localhost/wheelwright-standin-builder:cuda13.0-0123456789ab",
    )
    assert recipes.other_recipes(arm, cached) == (
        "localhost/wheelwright-standin-builder:cuda13.0-aarch64-ba9876543210",
    )


def test_another_cpus_image_takes_the_pythons_debian_ships_for_it() -> None:
    """An x86_64 machine has no aarch64 CPython to copy: the arm64 image takes Debian's own
    (release/emulate/sysroots.toml says which suite has which). The image suite's comes from apt; another
    suite's (trixie's 3.13 in a bookworm image) is unpacked privately with its own C library; the
    ones no suite has are left out, not faked."""
    bookworm = mbi.debian_pythons(("3.10", "3.11", "3.12", "3.13"), "bookworm", "aarch64")
    assert [(p.version, p.tag, p.prefix, p.suite) for p in bookworm] == [
        ("3.11", "cp311-cp311", Path("/usr"), None),
        ("3.13", "cp313-cp313", Path("/opt/_internal/debian-trixie/usr"), "trixie"),
    ]
    assert bookworm[1].private_root == "/opt/_internal/debian-trixie"
    assert "Debian trixie python3.13 (aarch64), unpacked privately" in bookworm[1].sys_version
    # apt installs only the image suite's Python and its headers; the private one's come unpacked
    packages = mbi.debian_python_packages(bookworm, "aarch64")
    assert "python3.11-dev" in packages and not any("3.13" in p for p in packages)
    trixie = mbi.debian_pythons(("3.13",), "trixie", "aarch64")
    assert [(p.version, p.suite) for p in trixie] == [("3.13", None)]
    assert mbi.debian_pythons(("3.10", "3.12"), "bookworm", "aarch64") == ()


def test_a_private_pythons_recipe_adds_its_headers_to_its_sysroots_packages() -> None:
    private = mbi._private_recipe("3.13", "aarch64")
    assert private.suite == "trixie" and "libpython3.13-dev" in private.packages
    assert "python3.13" in private.packages


def test_a_toolchain_without_one_nvcc_pin_is_refused() -> None:
    with pytest.raises(InputError, match="must pin nvidia-cuda-nvcc exactly once"):
        _ = _inputs(toolchain=("nvidia-cuda-runtime==13.0.96",)).full_version


# --------------------------------------------------------------------------- reading the machine (parsers)

SOURCES_822 = """\
Types: deb
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
"""


def test_the_mirror_is_the_source_serving_the_suite_with_main() -> None:
    sources = [
        *parse_one_line_sources("deb https://packages.example/apt cloud-sdk-bookworm main\n", "a.list"),
        *parse_deb822_sources(SOURCES_822, "debian.sources"),
    ]
    chosen = recipes.pick_mirror(sources, "bookworm")
    assert chosen.uri == "http://mirror.example/debian"
    assert chosen.signed_by == "/usr/share/keyrings/debian-archive-keyring.gpg"
    with pytest.raises(InputError, match=r"no apt source serves trixie main .*debian.sources"):
        recipes.pick_mirror(sources, "trixie")
    contrib_only = parse_one_line_sources("deb http://deb.example/debian bookworm contrib\n", "c.list")
    with pytest.raises(InputError, match="no apt source serves bookworm main"):
        recipes.pick_mirror(contrib_only, "bookworm")


def test_ldd_output_gives_paths_and_a_missing_library_is_an_error() -> None:
    text = (
        "\tlinux-vdso.so.1 (0x00007ffd)\n"
        "\tlibssl.so.3 => /lib/x86_64-linux-gnu/libssl.so.3 (0x00007f2a)\n"
        "\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f2a)\n"
        "\t/lib64/ld-linux-x86-64.so.2 (0x00007f2a)\n"
    )
    assert recipes.ldd_paths(text, "_ssl.so") == (
        "/lib/x86_64-linux-gnu/libssl.so.3",
        "/lib/x86_64-linux-gnu/libc.so.6",
    )
    with pytest.raises(ToolError, match=r"_ssl.so: libssl.so.3 => not found"):
        recipes.ldd_paths("\tlibssl.so.3 => not found\n", "_ssl.so")


def test_library_owners_come_from_dpkg_including_the_merged_usr_twin() -> None:
    owners = recipes.dpkg_owners(
        "libssl3:amd64: /usr/lib/x86_64-linux-gnu/libssl.so.3\n"
        "libc6:amd64: /lib/x86_64-linux-gnu/libc.so.6\n"
        "dpkg-query: no path found matching pattern /usr/lib/x86_64-linux-gnu/libc.so.6\n"
    )
    libs = ["/usr/lib/x86_64-linux-gnu/libssl.so.3", "/usr/lib/x86_64-linux-gnu/libc.so.6"]
    assert recipes.owning_packages(libs, owners) == ("libc6", "libssl3")
    with pytest.raises(ToolError, match=r"/opt/odd/libodd.so.1 .* belongs to no Debian package"):
        recipes.owning_packages(["/opt/odd/libodd.so.1"], owners)


def test_nvcc_must_be_the_trains_exact_release() -> None:
    text = "Cuda compilation tools, release 13.0, V13.0.88\nBuild cuda_13.0.r13.0/compiler.36424714_0\n"
    assert recipes.nvcc_problem(text, "13.0", "13.0.88") is None
    assert (
        recipes.nvcc_problem(text, "13.2", "13.2.86")
        == "nvcc is CUDA 13.0 (V13.0.88), the train needs 13.2 (V13.2.86)"
    )
    assert "names no release" in (
        recipes.nvcc_problem("bash: nvcc: command not found", "13.0", "13.0.88") or ""
    )


def test_the_standin_policy_replaces_exactly_one_trains_image(tmp_path: Path) -> None:
    text = (ROOT / "rows.toml").read_text(encoding="utf-8")
    out = tmp_path / "rows.toml"
    out.write_text(
        recipes.standin_policy_text(
            text, "pytorch/manylinux2_28-builder:cuda13.0", "localhost/x:1", "rows.toml"
        )
    )
    link_examples(tmp_path)  # the copy's project.path, examples/tinyaxpy
    rows = rows_by_id(out)
    original = rows_by_id()
    assert rows["cu130-py312-x86_64"].builder_image == "localhost/x:1"
    changed = {i for i in rows if rows[i] != original[i]}
    assert changed == {i for i in rows if i.startswith("cu130-") and i.endswith("x86_64")}
    with pytest.raises(InputError, match="appears 0 times"):
        recipes.standin_policy_text(text, "pytorch/nope:cuda13.0", "localhost/x:1", "rows.toml")
    twice = text.replace("pytorch/manylinux2_28-builder:cuda13.2", "pytorch/manylinux2_28-builder:cuda13.0")
    with pytest.raises(InputError, match="appears 2 times"):
        recipes.standin_policy_text(
            twice, "pytorch/manylinux2_28-builder:cuda13.0", "localhost/x:1", "rows.toml"
        )


def test_a_train_without_a_pypi_toolchain_has_no_standin() -> None:
    with pytest.raises(InputError, match=r'\[train."12.6"\] has no pypi_toolchain'):
        mbi.gather_inputs("12.6", ROOT / "rows.toml", ENV)
    with pytest.raises(InputError, match=r"no train '11.8'"):
        mbi.gather_inputs("11.8", ROOT / "rows.toml", ENV)


# --------------------------------------------------------------------------- the image


@pytest.fixture(scope="module")
def image() -> mbi.Image:
    return mbi.ensure_image("13.0", env=ENV)


LAYOUT_PROBE = r"""
set -e
for py in /opt/python/*/bin/python; do
  echo "python $py $($py -c 'import sys, build, packaging; print("%d.%d.%d" % sys.version_info[:3], build.__version__, packaging.__version__)')"
done
echo "helper $(readlink -f /opt/python/cp39-cp39/bin/python) $(/opt/python/cp39-cp39/bin/python -c 'import glob, json; print(1)')"
echo "cuda $(readlink /usr/local/cuda) $(readlink /usr/local/cuda/lib/libcudart.so)"
/usr/local/cuda/bin/nvcc --version | grep release
echo "auditwheel $(auditwheel --version)"
echo "patchelf $(patchelf --version)"
echo "gxx $(g++ -dumpfullversion)"
echo "pip_cert ${PIP_CERT:-unset} plat ${AUDITWHEEL_PLAT:-unset}"
"""


@pytest.mark.slow
@needs_engine
def test_the_image_has_the_builder_layout(image: mbi.Image) -> None:
    assert PROBE.engine is not None
    out = run([PROBE.engine, "run", "--rm", image.tag, "bash", "-c", LAYOUT_PROBE], env=ENV).stdout
    lines = out.splitlines()
    pythons = {ln.split()[1]: ln.split()[2:] for ln in lines if ln.startswith("python ")}
    inputs = mbi.gather_inputs("13.0", ROOT / "rows.toml", ENV)
    for py in inputs.pythons:
        assert pythons[f"/opt/python/{py.tag}/bin/python"] == [py.version, "1.6.1", "26.3"]
    assert len(pythons) == len(inputs.pythons) + 1  # and the helper
    helper = next(ln for ln in lines if ln.startswith("helper "))
    assert helper.endswith(" 1") and "/opt/_internal/cpython-" in helper
    assert "cuda cuda-13.0 libcudart.so.13" in lines
    assert any("release 13.0, V13.0.88" in ln for ln in lines)
    # the repair tools are the versions wheelwright runs on the host, from the tools venv
    assert re.search(r"auditwheel 6\.8\.2 installed at\s+/opt/_internal/tools/", out), out
    assert "patchelf patchelf 0.19.3" in lines
    assert any(ln.startswith("gxx 12.") for ln in lines)
    plat = "manylinux_2_28_x86_64"
    expected_cert = "/etc/ssl/certs/ca-certificates.crt" if inputs.ca_bundle else "unset"
    assert f"pip_cert {expected_cert} plat {plat}" in lines


@pytest.mark.slow
@needs_engine
def test_a_rerun_with_the_image_present_does_nothing(image: mbi.Image) -> None:
    assert PROBE.engine is not None
    before = run([PROBE.engine, "image", "inspect", image.tag, "--format", "{{.Id}}"], env=ENV).stdout
    stamp = image.tarball.stat().st_mtime_ns if image.tarball.exists() else None
    start = time.monotonic()
    again = mbi.ensure_image("13.0", env=ENV)
    assert again.made == "present" and again.tag == image.tag
    assert time.monotonic() - start < 60
    assert run([PROBE.engine, "image", "inspect", image.tag, "--format", "{{.Id}}"], env=ENV).stdout == before
    assert (image.tarball.stat().st_mtime_ns if image.tarball.exists() else None) == stamp
    provenance = run(
        [PROBE.engine, "run", "--rm", image.tag, "cat", "/etc/wheelwright-standin.json"], env=ENV
    )
    data = json.loads(provenance.stdout)
    assert data["key"] == mbi.gather_inputs("13.0", ROOT / "rows.toml", ENV).key
    assert data["tag"] == image.tag and data["train"] == "13.0"


def test_the_cli_prints_the_tag_it_would_make(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        expected = mbi.gather_inputs("13.0", ROOT / "rows.toml", ENV).tag
    except WheelwrightError as exc:  # e.g. no self-contained CPython here: the CLI must say the same
        assert mbi.main(["--print-tag"]) == exc.return_code
        assert str(exc) in capsys.readouterr().err
        return
    assert mbi.main(["--print-tag"]) == 0
    assert capsys.readouterr().out.strip() == expected
    assert expected.startswith("localhost/wheelwright-standin-builder:cuda13.0-")


# --------------------------------------------------------------------------- the CI plan job's image check


def _plan_check_script() -> str:
    """The `run:` block of the plan job's "every row is offered" step, as the runner gets it."""
    lines = (ROOT / ".github" / "workflows" / "wheels.yml").read_text(encoding="utf-8").splitlines()
    start = next(i for i, ln in enumerate(lines) if "- name: every row is offered" in ln)
    run_at = next(i for i in range(start, len(lines)) if lines[i].strip() == "run: |")
    indent = len(lines[run_at]) - len(lines[run_at].lstrip()) + 2
    body = []
    for line in lines[run_at + 1 :]:
        if line.strip() and len(line) - len(line.lstrip()) < indent:
            break
        body.append(line[indent:])
    return "\n".join(body) + "\n"


FAKE_DOCKER = """#!/bin/sh
# `docker manifest inspect IMAGE`, answered from the list of images that exist
[ "$1 $2" = "manifest inspect" ] || { echo "fake docker: unexpected $*" >&2; exit 2; }
if grep -qxF "$3" "$EXISTING"; then echo '{"schemaVersion": 2}'; exit 0; fi
echo "no such manifest: registry.example/$3:latest" >&2
exit 1
"""


def _run_plan_check(tmp_path: Path, existing: list[str]) -> subprocess.CompletedProcess[str]:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "docker").write_text(FAKE_DOCKER)
    (fake / "sleep").write_text("#!/bin/sh\nexit 0\n")  # the retries' waits
    for tool in ("docker", "sleep"):
        (fake / tool).chmod(0o755)
    (tmp_path / "existing.txt").write_text("".join(f"{i}\n" for i in existing))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("CIBW_")},
        "PATH": f"{fake}:{os.environ['PATH']}",
        "RUNNER_TEMP": str(tmp_path),
        "GITHUB_WORKSPACE": str(ROOT),
        "EXISTING": str(tmp_path / "existing.txt"),
    }
    return subprocess.run(
        ["bash", "-c", _plan_check_script()], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )


ALL_IMAGES = sorted({r.builder_image for r in expand(load_policy(ROOT / "rows.toml"))} - {"default"})


def test_the_plan_job_fails_naming_the_rows_of_a_missing_builder_image(tmp_path: Path) -> None:
    missing = "pytorch/manylinuxaarch64-builder:cuda13.2"
    assert missing in ALL_IMAGES
    result = _run_plan_check(tmp_path, [i for i in ALL_IMAGES if i != missing])
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert f"::error title=builder image missing::{missing} was not found in its registry" in out
    assert "4 advertised row(s) are not offered by the builders" in out
    for py in ("310", "311", "312", "313"):
        assert f"cu132-py{py}-aarch64: identifier cp{py}-manylinux_aarch64, image {missing}" in out
    assert "cu132-py312-x86_64" not in out


def test_the_plan_job_passes_when_every_builder_image_exists(tmp_path: Path) -> None:
    result = _run_plan_check(tmp_path, ALL_IMAGES)
    assert result.returncode == 0, result.stdout + result.stderr
    offered = json.loads((tmp_path / "offered.json").read_text())
    assert offered["version"] == 1 and sorted(offered["images"]) == ALL_IMAGES
    assert {"cp312-manylinux_x86_64", "cp313-manylinux_aarch64"} <= set(offered["identifiers"])
    for image in ALL_IMAGES:
        assert f"✓ {image} exists" in result.stdout


def test_an_unpacked_root_without_the_pythons_pyconfig_is_refused_naming_its_package(tmp_path: Path) -> None:
    """Must-fail: Debian's Python.h includes <aarch64-linux-gnu/python3.13/pyconfig.h>, which only
    libpython3.13-dev ships; a root without it would make an image whose 3.13 cannot build a module."""
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "usr/bin/python3.13").write_bytes(b"\x7fELF")
    problem = mbi.private_python_problem(tmp_path, "aarch64-linux-gnu", "3.13")
    assert (
        problem
        == "no usr/include/aarch64-linux-gnu/python3.13/pyconfig.h in it (is libpython3.13-dev in its packages?)"
    )
    (tmp_path / "usr/include/aarch64-linux-gnu/python3.13").mkdir(parents=True)
    (tmp_path / "usr/include/aarch64-linux-gnu/python3.13/pyconfig.h").write_text("#define X 1\n")
    assert mbi.private_python_problem(tmp_path, "aarch64-linux-gnu", "3.13") is None
    assert "python3.11-minimal" in (mbi.private_python_problem(tmp_path, "aarch64-linux-gnu", "3.11") or "")
