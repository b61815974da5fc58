"""wheelwright: release orchestration for CUDA Python wheels (``python -m release --help``)."""

__version__ = (
    "0.1.0"  # pyproject.toml's [project] version; tests/unit/test_cli_conventions.py holds them equal
)
