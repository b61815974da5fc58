"""The HTML audit report, rendered by a real headless Chromium.

The page is static (no JavaScript): Chromium's rendered DOM must hold the GPU grid with
one cell per (GPU, library) plus the wheel column, coloured by support, and a screenshot
of it must not be blank.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.chromium import headless

from release.audit.report.page import render_html
from release.audit.report.release_page import render_release_html
from release.audit.report.render import gpu_table_rows
from release.audit.run import audit_wheel, expectation_for_wheel
from release.policy.load import load_policy
from release.policy.matrix import expand

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
WHEELS = FIXTURES / "wheels"
GOOD = WHEELS / "fx_good_cu130-1.0.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl"
MISSING = WHEELS / "fx_missing_arch-1.0.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl"


def _audit(wheel: Path):  # type: ignore[no-untyped-def]
    policy = load_policy(FIXTURES / "policy.toml")
    return audit_wheel(wheel, expectation_for_wheel(wheel, policy, expand(policy)))


@pytest.mark.parametrize("wheel", [GOOD, MISSING], ids=["passing", "failing"])
def test_report_renders_with_the_right_grid(wheel: Path, tmp_path: Path) -> None:
    result = _audit(wheel)
    page = tmp_path / f"{wheel.name}.audit.html"
    page.write_text(render_html(result), encoding="utf-8")
    header, rows = gpu_table_rows(result)
    assert rows, "the fixture carries device code: the grid must have rows"
    libraries = len(header) - 4

    dom = headless(["--dump-dom", page.as_uri()], tmp_path)
    assert dom.returncode == 0, dom.stderr
    cells = re.findall(r'<td class="support (native|ptx-jit|none|other)">', dom.stdout)
    assert len(cells) == len(rows) * (libraries + 1)
    assert "<script" not in dom.stdout
    verdict = "PASSED" if result.passed else "FAILED"
    assert f'class="verdict {"pass" if result.passed else "fail"}">{verdict}' in dom.stdout
    if not result.passed:
        assert 'class="finding fail"' in dom.stdout

    shot = tmp_path / "shot.png"
    taken = headless([f"--screenshot={shot}", "--window-size=1200,900", page.as_uri()], tmp_path)
    assert taken.returncode == 0, taken.stderr
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 5_000, "a blank page compresses to almost nothing"


def test_release_page_lists_every_wheel(tmp_path: Path) -> None:
    results = [_audit(GOOD), _audit(MISSING)]
    page = tmp_path / "release.html"
    page.write_text(render_release_html(results), encoding="utf-8")
    dom = headless(["--dump-dom", page.as_uri()], tmp_path)
    assert dom.returncode == 0, dom.stderr
    assert dom.stdout.count('<section class="wheel"') == 2
    assert "passed" in dom.stdout and "FAILED" in dom.stdout
