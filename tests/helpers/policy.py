"""Test helpers for policies a test writes into a folder of its own: the Python project their
``project.path`` must name.

A policy is refused at load unless ``project.path``, relative to the policy file's folder, is a
folder holding a pyproject.toml or a setup.py (release/policy/load.py). A test that copies a
policy elsewhere and never builds from it gives it a stand-in with :func:`stub_project`; one
whose copy must reach the real example packages links them with :func:`link_examples`.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def stub_project(folder: Path, path: str = ".") -> Path:
    """A minimal Python project (a pyproject.toml naming ``stub``) at ``folder/path``, unless
    one is there already; its folder."""
    where = folder / path
    where.mkdir(parents=True, exist_ok=True)
    pyproject = where / "pyproject.toml"
    if not pyproject.exists():
        pyproject.write_text('[project]\nname = "stub"\nversion = "0"\n', encoding="utf-8")
    return where


def link_examples(folder: Path) -> Path:
    """``folder/examples`` as a symlink to this repository's examples/, so a copy of rows.toml
    (``path = "examples/tinyaxpy"``) written into ``folder`` names the real package."""
    link = folder / "examples"
    if not link.is_symlink():
        folder.mkdir(parents=True, exist_ok=True)
        link.symlink_to(ROOT / "examples", target_is_directory=True)
    return link
