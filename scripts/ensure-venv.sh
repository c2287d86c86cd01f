#!/usr/bin/env bash
# Create .venv if missing and (re)install the project when pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
  echo "holdline needs Python 3.11 or newer ($PYTHON is $("$PYTHON" --version 2>&1))" >&2
  exit 1
fi

# The silero-vad wheel only for its model file: its metadata requires torch, which the ONNX
# model does not need, so it is installed without dependencies (pinned: the file's inputs
# are the model version's). Part of the stamp, like pyproject.toml.
SILERO="silero-vad==6.2.3"
hash=$( (cat pyproject.toml; echo "$SILERO") | sha256sum | cut -c1-16)
stamp=".venv/.deps-$hash"

if [ ! -x .venv/bin/python ]; then
  echo "creating .venv"
  "$PYTHON" -m venv .venv
fi
if [ ! -f "$stamp" ]; then
  echo "installing dependencies into .venv"
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
  .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps "$SILERO"
  rm -f .venv/.deps-*
  touch "$stamp"
fi
