from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--regen-golden",
        action="store_true",
        help="rewrite tests/golden/*.json from the current code instead of comparing",
    )


@pytest.fixture
def repo_root() -> Path:
    return ROOT
