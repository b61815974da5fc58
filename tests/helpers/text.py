"""Test helpers for edited copies of a text file (a policy, a table, a recipe) that must be refused."""

from __future__ import annotations


def edited(text: str, edit: tuple[str, str]) -> str:
    """``text`` with its first ``edit[0]`` replaced by ``edit[1]``; fails the test when ``edit[0]``
    is not in ``text`` (an edit that changes nothing would test the unedited text)."""
    old, new = edit
    assert old in text, f"the text to edit is not there: {old!r}"
    return text.replace(old, new, 1)
