"""Strict spellings: each pattern with spellings that must pass and spellings that must fail."""

from __future__ import annotations

import pytest

from release.policy.versions import (
    KNOWN_CUDA_TRAINS,
    KNOWN_PYTHONS,
    is_free_threaded,
    name_problem,
    python_problem,
    shown,
    token_problem,
    train_problem,
    train_variant,
)


@pytest.mark.parametrize("py", [*KNOWN_PYTHONS, "3.13t"])
def test_known_pythons_pass(py: str) -> None:
    assert python_problem(py) is None


@pytest.mark.parametrize(
    ("py", "fragment"),
    [
        ("3.12\n", "leading or trailing whitespace"),
        (" 3.12", "leading or trailing whitespace"),
        ("3.１２", "non-ASCII"),
        ("３.12", "non-ASCII"),
        ("3.0", "not a CPython version wheelwright knows (3.8 to 3.15)"),
        ("3.7", "not a CPython version wheelwright knows"),
        ("3.99", "not a CPython version wheelwright knows"),
        ("3.99t", "not a CPython version wheelwright knows"),
        ("3.012", "not a CPython version like '3.12'"),
        ("3.12.1", "not a CPython version like '3.12'"),
        ("2.7", "not a CPython version like '3.12'"),
        ("3", "not a CPython version like '3.12'"),
        ("3.12a", "not a CPython version like '3.12'"),
        ("py312", "not a CPython version like '3.12'"),
    ],
)
def test_bad_pythons_fail(py: str, fragment: str) -> None:
    problem = python_problem(py)
    assert problem is not None and fragment in problem, problem


def test_free_threaded() -> None:
    assert is_free_threaded("3.13t") and not is_free_threaded("3.13") and not is_free_threaded("3.13\nt")


@pytest.mark.parametrize("train", KNOWN_CUDA_TRAINS)
def test_known_trains_pass(train: str) -> None:
    assert train_problem(train) is None
    assert train_variant(train) == "cu" + train.replace(".", "")


@pytest.mark.parametrize(
    ("train", "fragment"),
    [
        ("13.0\n", "leading or trailing whitespace"),
        ("１３.０", "non-ASCII"),
        ("99.9", "not a CUDA release wheelwright knows"),
        ("12.7", "not a CUDA release wheelwright knows"),
        ("13.10", "not a CUDA version like '13.0'"),
        ("9.2", "not a CUDA version like '13.0'"),
        ("13", "not a CUDA version like '13.0'"),
        ("cu130", "not a CUDA version like '13.0'"),
    ],
)
def test_bad_trains_fail(train: str, fragment: str) -> None:
    problem = train_problem(train)
    assert problem is not None and fragment in problem, problem


def test_train_variant_refuses_what_is_not_a_train() -> None:
    with pytest.raises(ValueError, match="not a CUDA version"):
        train_variant("13.0\n")


@pytest.mark.parametrize("name", ["tinyaxpy", "tiny-axpy", "tiny_axpy", "tiny.axpy", "T1", "a", "9lives"])
def test_distribution_names_pass(name: str) -> None:
    assert name_problem(name) is None


@pytest.mark.parametrize(
    "name", ["tiny axpy", "tiny/axpy", "tïnyaxpy", "-tiny", "tiny-", ".tiny", "tiny\n", "", "tiny==1.0"]
)
def test_bad_distribution_names_fail(name: str) -> None:
    problem = name_problem(name)
    assert problem is not None and "is not a valid distribution name" in problem


def test_tokens_and_how_values_are_shown() -> None:
    assert token_problem("x86_64") is None
    assert token_problem("pytorch/manylinux2_28-builder:cuda13.0") is None
    assert "whitespace" in (token_problem("x86_64\n") or "")
    assert "non-ASCII" in (token_problem("x86_６４") or "")
    assert "spaces or control characters" in (token_problem("a b") or "")
    assert "spaces or control characters" in (token_problem("a\x00b") or "")
    assert shown("3.12\n") == "'3.12\\n'"
    assert len(shown("x" * 10_000)) == 80
