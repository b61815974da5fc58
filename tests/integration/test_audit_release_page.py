"""The release page (``dist/audit.html``) leads with the answer, read in a real headless Chromium.

Issue 24 item 7: first a grid (CUDA wheels by GPUs, each cell the wheel column of that wheel's own
GPU table), the CPU wheels listed compactly; then every failing check, or one line saying every wheel
passed every check; then each wheel's full report folded in a ``<details>``, open only when it failed.
The results are real audits of the fixture wheels (tests/fixtures/wheels/) against the fixture
policy; the hostile case audits a copy of a fixture wheel with a member named as HTML, and gives
a real result a wheel name holding HTML (no valid wheel file name can).
"""

from __future__ import annotations

import dataclasses
import shutil
import zipfile
from pathlib import Path

import pytest
from helpers.chromium import Node, dump_dom, parse

from release.audit.model import AuditResult
from release.audit.report.page import wheel_section
from release.audit.report.release_page import ALL_PASSED, render_release_html
from release.audit.report.render import gpu_table_rows
from release.audit.run import audit_wheel, expectation_for_wheel
from release.policy.load import load_policy
from release.policy.matrix import expand

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
WHEELS = FIXTURES / "wheels"
GOOD = WHEELS / "fx_good_cu130-1.0.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl"
CPU = WHEELS / "fx_good_cpu-1.0.0-cp312-cp312-manylinux_2_28_x86_64.whl"
MISSING = WHEELS / "fx_missing_arch-1.0.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl"
NO_CODE = WHEELS / "fx_no_device_code-1.0.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl"
HOSTILE_MEMBER = "fx_good_cpu/<img src=x onerror=\"document.title='owned'\">.py"
HOSTILE_NAME = "fx_<b>bold</b>_\"q'-1.0.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl"


def _audit(wheel: Path) -> AuditResult:
    policy = load_policy(FIXTURES / "policy.toml")
    return audit_wheel(wheel, expectation_for_wheel(wheel, policy, expand(policy)))


def _rendered(results: list[AuditResult], tmp: Path) -> tuple[str, Node]:
    page = tmp / "audit.html"
    source = render_release_html(results, title="Audit of the fx release (rehearsal)")
    page.write_text(source, encoding="utf-8")
    return source, parse(dump_dom(page, tmp))


def _position(root: Node, node: Node) -> int:
    return next(i for i, n in enumerate(root.iter()) if n is node)


def _grid(root: Node) -> tuple[list[str], dict[str, list[str]]]:
    """The grid's GPU column names, and per wheel (by its name) its cells' text."""
    table = root.find("table", "overview")
    header = [th.text() for th in table.find_all("th")]
    rows = {}
    for tr in table.find_all("tr", "cuda-wheel"):
        cells = [td.text() for td in tr.find_all("td")]
        rows[cells[1]] = cells
    return header, rows


def test_a_passing_release_leads_with_the_grid_and_says_every_wheel_passed(tmp_path: Path) -> None:
    good, cpu = _audit(GOOD), _audit(CPU)
    assert good.passed and cpu.passed and good.expectation.is_cuda and not cpu.expectation.is_cuda
    source, root = _rendered([good, cpu], tmp_path)

    header, rows = _grid(root)
    _, table = gpu_table_rows(good)
    assert header[:3] == ["row", "wheel", "audit"]
    assert header[3:] == [f"{gpu} {cc}" for gpu, cc, *_ in table], "the GPU table's GPUs, in its order"
    assert list(rows) == [GOOD.name], "one grid row per CUDA wheel; the CPU wheel has none"
    cells = rows[GOOD.name]
    assert cells[0] == good.expectation.row_id and cells[2] == "passed"
    # each cell is the wheel column of its own GPU table, '*' where the row claims the GPU's capability
    assert cells[3:] == [row[-1] + ("*" if row[2] == "yes" else "") for row in table]
    by_gpu = dict(zip(header[3:], cells[3:], strict=True))
    # the fixture row claims 8.0 and 9.0+PTX: SASS for A100 and H100, PTX for newer GPUs, nothing for a T4
    assert by_gpu["A100 8.0"] == "native*" and by_gpu["H100 / H200 9.0"] == "native*"
    assert by_gpu["B200 10.0"] == "ptx-jit" and by_gpu["T4 / RTX 20 7.5"] == "none"
    assert "Jetson Thor 11.0" not in by_gpu and "GH200 9.0" not in by_gpu  # an x86_64 wheel: its CPU's GPUs
    assert len(root.find_all("td", "claimed")) == 2 and not root.find_all(
        "small", "predicted"
    )  # as predicted

    listed = root.find("ul", "cpu-wheels").find_all("li", "cpu-wheel")
    assert [li.text() for li in listed] == [f"{cpu.expectation.row_id}: {CPU.name} passed"]

    passed_line = root.find("p", "all-passed")
    assert passed_line.text() == ALL_PASSED
    assert not root.find_all("tr", "failure")

    folded = root.find_all("details", "report")
    assert len(folded) == 2 and not any("open" in d.attrs for d in folded), "passing reports are folded"
    assert (
        _position(root, root.find("table", "overview"))
        < _position(root, passed_line)
        < _position(root, folded[0])
    )
    assert [d.find("section", "wheel").find("h2").text() for d in folded] == [GOOD.name, CPU.name]
    assert wheel_section(good) in source and wheel_section(cpu) in source, "the full reports, unchanged"

    # self-contained: no script, no stylesheet or image from elsewhere
    assert not root.find_all("script") and not root.find_all("link") and not root.find_all("img")
    assert all(not n.attrs.get("href", "#").startswith(("http:", "https:", "//")) for n in root.iter())


def test_a_failing_wheel_is_listed_first_and_its_report_open(tmp_path: Path) -> None:
    good, cpu, missing, no_code = _audit(GOOD), _audit(CPU), _audit(MISSING), _audit(NO_CODE)
    assert not missing.passed and not no_code.passed and not no_code.gpu_table
    _, root = _rendered([good, cpu, missing, no_code], tmp_path)
    failing = [(MISSING.name, f) for f in missing.failures] + [(NO_CODE.name, f) for f in no_code.failures]

    assert not root.find_all("p", "all-passed"), "one failing wheel: not every wheel passed"
    # must differ: the row's list (8.0;9.0+PTX) promised H100 natively; the wheel has only PTX for it
    _, rows = _grid(root)
    header, _ = _grid(root)
    h100 = dict(zip(header[3:], rows[MISSING.name][3:], strict=True))["H100 / H200 9.0"]
    assert h100 == "ptx-jit* predicted native", h100
    sections = [s.attrs.get("id") for s in root.find_all("section") if s.attrs.get("id")]
    assert sections[:3] == ["overview", "failures", "reports"]
    listed = root.find_all("tr", "failure")
    assert [(tr.find_all("td")[0].text(), tr.find_all("td")[2].attrs["data-check"]) for tr in listed] == [
        (name, f.check) for name, f in failing
    ]
    assert [tr.find("td", "message").text() for tr in listed] == [
        " ".join(f.message.split()) for _, f in failing
    ]

    folded = root.find_all("details", "report")
    first_report = _position(root, folded[0])
    assert all(_position(root, tr) < first_report for tr in listed), "the failures come before any report"
    opened = {d.find("section", "wheel").find("h2").text(): "open" in d.attrs for d in folded}
    assert opened == {GOOD.name: False, CPU.name: False, MISSING.name: True, NO_CODE.name: True}

    _, rows = _grid(root)
    assert rows[MISSING.name][2] == "FAILED" and rows[GOOD.name][2] == "passed"
    assert rows[NO_CODE.name][2:] == ["FAILED", "no readable device code: runs on no GPU"]


def test_html_in_a_wheel_name_or_a_message_stays_text(tmp_path: Path) -> None:
    hostile = tmp_path / "wheels" / CPU.name
    hostile.parent.mkdir()
    shutil.copy(CPU, hostile)
    with zipfile.ZipFile(hostile, "a") as z:
        z.writestr(HOSTILE_MEMBER, "x = 1\n")
    unlisted = _audit(hostile)  # a real finding: a member RECORD does not list, named as HTML
    assert any(HOSTILE_MEMBER in f.message for f in unlisted.failures)
    renamed = dataclasses.replace(_audit(GOOD), wheel=HOSTILE_NAME)
    _, root = _rendered([renamed, unlisted], tmp_path)

    assert not root.find_all("img") and not root.find_all("b"), "no element made from a wheel's text"
    assert root.find("title").text() == "Audit of the fx release (rehearsal)", "no handler ran"
    _, rows = _grid(root)
    assert HOSTILE_NAME in rows
    messages = [tr.find("td", "message").text() for tr in root.find_all("tr", "failure")]
    assert any(HOSTILE_MEMBER in m for m in messages)
    summaries = [d.find("summary").text() for d in root.find_all("details", "report")]
    assert summaries[0].startswith(HOSTILE_NAME)
