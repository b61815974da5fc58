"""release/resources/cuda.toml's [headers]: the CUDA toolkit's headers by package, the driver API's headers
and the system libraries CUDA's interop headers need, validated by key (release/resources/cuda_headers.py)
and read by the C++ consumer check (release/audit/cpp/cuda_headers.py)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from helpers.text import edited

from release.audit.cpp import cuda_headers as cpp_cuda
from release.audit.cpp.cuda_headers import lacking_system_headers, toolkit_package
from release.resources.cuda import ResourceError, SystemLibrary, cuda, parse

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "release" / "resources" / "cuda.toml"
_ENTRIES = {
    "toolkit": r"\[\[headers\.toolkit\]\]\n(?:[^\n]+\n)*\n",
    "system": r"\[\[headers\.system\]\]\n(?:[^\n]+\n)*\n",
}


def _shipped() -> str:
    return TABLE.read_text(encoding="utf-8")


def _with_key(key: str, value: str) -> str:
    """The shipped table with every ``[[headers.<key>]]`` entry removed and ``key = value`` written instead."""
    text, removed = re.subn(_ENTRIES[key], "", _shipped())
    assert removed > 1, f"no [[headers.{key}]] entries to remove"
    return edited(text, ("\n[headers]\n", f"\n[headers]\n{key} = {value}\n"))


def _refused(text: str) -> str:
    with pytest.raises(ResourceError) as info:
        parse(text)
    assert info.value.return_code == 3
    assert str(info.value).startswith("release/resources/cuda.toml: ")
    return str(info.value)


def test_the_shipped_headers_parse_and_are_frozen() -> None:
    facts = parse(_shipped())
    assert facts == cuda()
    packages = [package for package, _ in facts.toolkit_headers]
    assert len(packages) == len(set(packages)) and all(patterns for _, patterns in facts.toolkit_headers)
    assert isinstance(facts.driver_headers, frozenset) and facts.driver_headers
    assert all(isinstance(s, SystemLibrary) and s.needed_by for s in facts.system_libraries)
    assert facts.driver_headers == cpp_cuda.DRIVER_HEADERS  # cpp_consumer's name for them


def test_the_first_matching_entry_names_the_package() -> None:
    """Order is kept: cudaProfiler.h and cuda_stdint.h match nvidia-cuda-runtime's cuda*.h too, and are
    named by the earlier nvidia-cuda-profiler-api and nvidia-cuda-cupti entries."""
    patterns = dict(cuda().toolkit_headers)
    assert "cuda*.h" in patterns["nvidia-cuda-runtime"]
    assert toolkit_package("cudaProfiler.h") == "nvidia-cuda-profiler-api"
    assert toolkit_package("cuda_stdint.h") == "nvidia-cuda-cupti"
    assert toolkit_package("cuda_runtime.h") == "nvidia-cuda-runtime"
    for header in cuda().driver_headers:
        assert toolkit_package(header) is not None, header


def _all_but(header: str) -> Callable[[str], bool]:
    """A ``found`` that finds every header but ``header``."""
    return lambda target: target != header


def test_the_system_libraries_come_from_the_table() -> None:
    """Each [[headers.system]] entry: its CUDA header needs it when its header is not found, else not."""
    for library in cuda().system_libraries:
        needing = library.needed_by[0]
        files = {needing: b"", "sdk.h": f"#include <{needing}>\n".encode()}
        missing = lacking_system_headers(files, ["sdk.h"], _all_but(library.header))
        assert missing == {"sdk.h": library.title}, library
        assert lacking_system_headers(files, ["sdk.h"], lambda target: True) == {}


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        # [headers] itself
        (("\n[headers]\n", "\n[headers]\ncuda12 = []\n"), "headers: unknown keys ['cuda12']"),
        (('driver = ["cuda.h", "cudaGL.h", "cudaEGL.h", "cudaVDPAU.h", "cudaProfiler.h"]\n', ""), "headers.driver: missing"),
        # driver
        (('driver = ["cuda.h", "cudaGL.h"', 'driver = "cuda.h"  # ["cudaGL.h"'), "headers.driver: must be a non-empty list"),
        (('driver = ["cuda.h", "cudaGL.h", "cudaEGL.h", "cudaVDPAU.h", "cudaProfiler.h"]', "driver = []"), "headers.driver: must be a non-empty list"),
        (('driver = ["cuda.h", "cudaGL.h"', 'driver = ["cuda.h", "libcuda.h"'), "headers.driver: 'libcuda.h' is not a toolkit header"),
        (('driver = ["cuda.h", "cudaGL.h"', 'driver = ["cuda.h", "cuda.h"'), "headers.driver: ['cuda.h'] listed twice"),
        (('driver = ["cuda.h", "cudaGL.h"', 'driver = ["cuda.h", 5'), "headers.driver: must be a non-empty string, not 5"),
        # [[headers.toolkit]]
        (('package = "nvidia-cuda-crt"', 'package = "nvidia cuda crt"'), "headers.toolkit[0].package: 'nvidia cuda crt' is not a valid distribution name"),
        (('package = "nvidia-cuda-crt"', 'package = "-nvidia-cuda-crt"'), "headers.toolkit[0].package: '-nvidia-cuda-crt' is not a valid distribution name"),
        (('package = "nvidia-cuda-crt"', 'package = "NVIDIA_cuda.crt"'), "headers.toolkit[0].package: 'NVIDIA_cuda.crt': write the canonical name 'nvidia-cuda-crt'"),
        (('package = "nvidia-cuda-crt"', "package = 13"), "headers.toolkit[0].package: must be a distribution name, not 13"),
        (('package = "nvidia-cuda-crt"\n', ""), "headers.toolkit[0].package: missing"),
        (('package = "nvidia-nvvm"\n', 'package = "nvidia-cuda-nvcc"\n'), "headers.toolkit[6].package: 'nvidia-cuda-nvcc' has an entry already"),
        (('patterns = ["crt/*"]', "patterns = []"), "headers.toolkit[0].patterns: must be a non-empty list"),
        (('patterns = ["crt/*"]', 'patterns = "crt/*"'), "headers.toolkit[0].patterns: must be a non-empty list"),
        (('patterns = ["crt/*"]\n', ""), "headers.toolkit[0].patterns: missing"),
        (('patterns = ["crt/*"]', 'patterns = ["/usr/include/crt/*"]'), "headers.toolkit[0].patterns: '/usr/include/crt/*' is not an include's target"),
        (('patterns = ["crt/*"]', 'patterns = ["../crt/*"]'), "headers.toolkit[0].patterns: '../crt/*' is not an include's target"),
        (('patterns = ["crt/*"]', 'patterns = ["crt/* cub/*"]'), "headers.toolkit[0].patterns: 'crt/* cub/*' is not an include's target"),
        (('patterns = ["nvvm.h"]', 'patterns = ["nvrtc.h"]'), "headers.toolkit[8].patterns: 'nvrtc.h' is given already in headers.toolkit[6].patterns"),
        (('patterns = ["crt/*"]', 'patterns = ["crt/*"]\ncuda12 = "nvidia-cuda-nvcc-cu12"'), "headers.toolkit[0]: unknown keys ['cuda12']"),
        # [[headers.system]]
        (('pattern = "vdpau/*"', 'pattern = ["vdpau/*"]'), "headers.system[0].pattern: must be a non-empty string"),
        (('pattern = "vdpau/*"\n', ""), "headers.system[0].pattern: missing"),
        (('header = "vdpau/vdpau.h"', 'header = "vdpau.h"'), "headers.system[0].header: 'vdpau.h' does not match its pattern 'vdpau/*'"),
        (('header = "GL/gl.h"', "header = 1"), "headers.system[1].header: must be a non-empty string, not 1"),
        (('title = "EGL\'s headers (EGL/egl.h; Debian: libegl-dev)"', 'title = " "'), "headers.system[2].title: must be a non-empty string"),
        (('title = "EGL\'s headers (EGL/egl.h; Debian: libegl-dev)"\n', ""), "headers.system[2].title: missing"),
        (('needed_by = ["cudaEGL.h", "cudaEGLTypedefs.h", "cuda_egl_interop.h"]', "needed_by = []"), "headers.system[2].needed_by: must be a non-empty list"),
        (('needed_by = ["cudaEGL.h", "cudaEGLTypedefs.h", "cuda_egl_interop.h"]', 'needed_by = "cudaEGL.h"'), "headers.system[2].needed_by: must be a non-empty list"),
        (('needed_by = ["cudaEGL.h", "cudaEGLTypedefs.h", "cuda_egl_interop.h"]', 'needed_by = ["cudaEGL.h"]\ndebian = "libegl-dev"'), "headers.system[2]: unknown keys ['debian']"),
    ],
)  # fmt: skip
def test_a_broken_headers_entry_is_refused_by_key(edit: tuple[str, str], expected: str) -> None:
    assert expected in _refused(edited(_shipped(), edit))


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("toolkit", '"nvidia-cuda-runtime"', "headers.toolkit: must be a non-empty array of tables"),
        ("toolkit", "[]", "headers.toolkit: must be a non-empty array of tables"),
        ("toolkit", '["crt/*"]', "headers.toolkit[0]: must be a table with ['package', 'patterns']"),
        ("system", "[]", "headers.system: must be a non-empty array of tables"),
        ("system", '{ pattern = "GL/*" }', "headers.system: must be a non-empty array of tables"),
        (
            "system",
            '[{ pattern = "GL/*", header = "GL/gl.h", title = "OpenGL" }]',
            "headers.system[0].needed_by: missing",
        ),
    ],
)
def test_a_section_of_the_wrong_shape_is_refused(key: str, value: str, expected: str) -> None:
    assert expected in _refused(_with_key(key, value))


def test_a_table_without_headers_is_refused() -> None:
    text, removed = re.subn(r"(?ms)^\[headers\]\n.*?(?=^# -{10,} runners)", "", _shipped())
    assert removed == 1 and not re.search(r"(?m)^\[\[?headers", text)  # the section is gone, nothing else
    assert "headers: no [headers] table" in _refused(text)
