#!/usr/bin/env bash
# Set up .venv with wheelwright and its pinned tools. Idempotent; safe to rerun.
# This machine's pip configuration adds constraints and local indexes; we ignore it
# (PIP_CONFIG_FILE=/dev/null) so a fresh machine and CI resolve exactly the pins.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${WHEELWRIGHT_BOOTSTRAP_PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null || PYTHON=python3
export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1
stamp=.venv/.wheelwright-installed
if [[ ! -x .venv/bin/python ]]; then
  echo "==> creating .venv with $($PYTHON --version)" >&2
  "$PYTHON" -m venv .venv
fi
if [[ ! -f $stamp || pyproject.toml -nt $stamp ]]; then
  echo "==> installing wheelwright and pinned tools into .venv" >&2
  .venv/bin/python -m pip install -q --upgrade pip
  # setuptools' "Editable installation ... folders with the same name as your package" notice is for
  # every flat-layout editable install, this one's too: a newcomer read it as something gone wrong
  PYTHONWARNINGS="ignore:Editable installation" .venv/bin/python -m pip install -q -e '.[dev]'
  touch "$stamp"
fi
echo "==> .venv ready: $(.venv/bin/python --version), nox $(.venv/bin/nox --version 2>&1)" >&2
