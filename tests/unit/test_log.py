"""The one logger: levels, said-once lines, per-thread capture, GitHub Actions groups,
annotations and job summary; plain output elsewhere."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from release.core import log


@pytest.fixture(autouse=True)
def _plain() -> Iterator[None]:
    log.configure(level=log.NORMAL, env={})
    yield
    log.configure(level=log.NORMAL, env={})


def test_levels(capsys: pytest.CaptureFixture[str]) -> None:
    log.configure(level=log.QUIET, env={})
    log.say("cu130-py312-x86_64", "building")
    log.info("a run line")
    log.detail("a detail")
    log.warn("a warning")
    assert capsys.readouterr().err == "a warning\n"
    log.configure(level=log.NORMAL, env={})
    log.say("cu130-py312-x86_64", "building")
    log.detail("a detail")
    assert capsys.readouterr().err == "==> [cu130-py312-x86_64] building\n"
    log.configure(level=log.VERBOSE, env={})
    log.detail("a detail")
    assert capsys.readouterr().err == "a detail\n"


def test_once_is_said_once_even_inside_a_capture(capsys: pytest.CaptureFixture[str]) -> None:
    with log.capture() as cap:
        assert log.once("no container engine works here", key="engine")
        assert not log.once("no container engine works here (again)", key="engine")
    assert capsys.readouterr().err == "no container engine works here\n"
    assert cap.lines == []


def test_capture_keeps_a_threads_lines_and_lets_others_through(capsys: pytest.CaptureFixture[str]) -> None:
    seen: dict[str, list[str]] = {}

    def row(name: str) -> None:
        with log.capture() as cap:
            for i in range(50):
                log.say(name, f"step {i}")
            log.detail("a detail is kept in a capture at any level")
        seen[name] = cap.lines

    threads = [threading.Thread(target=row, args=(f"row{n}",)) for n in range(4)]
    for t in threads:
        t.start()
    log.info("the main thread is not captured")
    for t in threads:
        t.join()
    assert capsys.readouterr().err == "the main thread is not captured\n"
    for n in range(4):
        lines = seen[f"row{n}"]
        assert lines[:50] == [f"==> [row{n}] step {i}" for i in range(50)]  # each thread its own, in order
        assert lines[50] == "a detail is kept in a capture at any level"


def test_warn_inside_a_capture_is_written_and_kept(capsys: pytest.CaptureFixture[str]) -> None:
    with log.capture() as cap:
        log.warn("the disk is nearly full")
    assert capsys.readouterr().err == "the disk is nearly full\n"
    assert cap.lines == ["the disk is nearly full"]


def test_verbose_capture_also_writes(capsys: pytest.CaptureFixture[str]) -> None:
    log.configure(level=log.VERBOSE, env={})
    with log.capture() as cap:
        log.say("cpu-py312-x86_64", "auditing")
    assert capsys.readouterr().err == "==> [cpu-py312-x86_64] auditing\n"
    assert cap.lines == ["==> [cpu-py312-x86_64] auditing"]


def test_nested_capture_hands_its_lines_to_the_outer_one() -> None:
    with log.capture() as outer:
        log.info("outer")
        with log.capture() as inner:
            log.info("inner")
    assert inner.lines == ["inner"]
    assert outer.lines == ["outer", "inner"]


def test_plain_output_has_no_workflow_commands(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    with log.group("cu130-py312-x86_64"):
        log.info("inside")
    log.folded("cu130-py312-x86_64: build ok", ["a line"])
    log.annotate("device_code", "libx.so misses sm_90")
    assert log.job_summary("| a |", env={}) is None
    err = capsys.readouterr().err
    assert "::" not in err
    assert err == "==> cu130-py312-x86_64\ninside\n==> cu130-py312-x86_64: build ok\na line\n"
    assert not summary.exists()


def test_github_actions_groups_annotations_and_summary(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    log.configure(level=log.NORMAL, env={"GITHUB_ACTIONS": "true"})
    assert log.github()
    with log.group("cu130-py312-x86_64: build"):
        log.info("inside")
    log.folded("cu130-py312-x86_64: build ok 1.0 s", ["line 1", "line 2"])
    log.annotate("device_code", "libx.so: 50% of\nthe archs, a:b")
    summary = tmp_path / "summary.md"
    assert log.job_summary("| GPU | cc |", env={"GITHUB_STEP_SUMMARY": str(summary)}) == summary
    assert log.job_summary("second", env={"GITHUB_STEP_SUMMARY": str(summary)}) == summary
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "::group::cu130-py312-x86_64: build",
        "inside",
        "::endgroup::",
        "::group::cu130-py312-x86_64: build ok 1.0 s",
        "line 1",
        "line 2",
        "::endgroup::",
        "::error title=device_code::libx.so: 50%25 of%0Athe archs, a:b",
    ]
    assert summary.read_text() == "| GPU | cc |\n\nsecond\n\n"


def test_annotation_title_is_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    log.configure(level=log.QUIET, env={"GITHUB_ACTIONS": "true"})
    log.annotate("smoke failed: cu130, py312", "x")  # annotations are said even when quiet
    assert capsys.readouterr().err == "::error title=smoke failed%3A cu130%2C py312::x\n"
