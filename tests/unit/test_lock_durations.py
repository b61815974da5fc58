"""Seconds a person gives (the lock's wait, the probe's timeout, the publish deadlines): one parser,
exit 2 on nonsense."""

from __future__ import annotations

import pytest

from release.core.durations import seconds
from release.core.errors import InputError
from release.publish.guards.deadlines import Deadlines, deadlines_for
from release.publish.guards.lock import DEFAULT_WAIT_S, WAIT_ENV, wait_from_env


@pytest.mark.parametrize(
    ("raw", "expected"), [("", DEFAULT_WAIT_S), ("  ", DEFAULT_WAIT_S), ("0", 0.0), ("2.5", 2.5)]
)
def test_the_lock_wait_is_read_from_the_environment(raw: str, expected: float) -> None:
    assert wait_from_env({WAIT_ENV: raw}) == expected
    assert wait_from_env({}) == DEFAULT_WAIT_S


@pytest.mark.parametrize("raw", ["-1", "x", "inf", "nan", "1e999"])
def test_a_lock_wait_that_is_not_seconds_is_bad_input(raw: str) -> None:
    with pytest.raises(InputError, match=rf"{WAIT_ENV}='{raw}': give a number of seconds, 0 or more") as info:
        wait_from_env({WAIT_ENV: raw})
    assert info.value.return_code == 2


@pytest.mark.parametrize("raw", ["0", "-3", "ten", "inf"])
def test_a_timeout_must_be_positive(raw: str) -> None:
    with pytest.raises(InputError, match="--probe-timeout: give a positive, finite number of seconds"):
        seconds(raw, "--probe-timeout", zero_ok=False)
    assert seconds("0.5", "--probe-timeout", zero_ok=False) == 0.5


@pytest.mark.parametrize("raw", ["0", "-1", "soon", "inf", "nan", "1e999"])
@pytest.mark.parametrize("name", ["WHEELWRIGHT_CU130_UPLOAD_DEADLINE_S", "WHEELWRIGHT_REQUEST_DEADLINE_S"])
def test_a_deadline_that_is_not_seconds_names_its_variable(name: str, raw: str) -> None:
    with pytest.raises(InputError) as info:
        deadlines_for("cu130", {name: f" {raw} "})
    assert str(info.value) == f"{name}={raw!r}: give a positive, finite number of seconds"
    assert info.value.return_code == 2


def test_a_deadline_is_read_through_the_one_parser() -> None:
    got = deadlines_for(
        "cu130", {"WHEELWRIGHT_CU130_UPLOAD_DEADLINE_S": " 2.5 ", "WHEELWRIGHT_REQUEST_DEADLINE_S": "  "}
    )
    assert (got.upload_s, got.request_s) == (2.5, Deadlines().request_s)  # blank: not set
