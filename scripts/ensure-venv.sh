#!/usr/bin/env bash
# Create .venv if missing and (re)install the project when pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
  echo "holdline needs Python 3.11 or newer ($PYTHON is $("$PYTHON" --version 2>&1))" >&2
  exit 1
fi

# Dependencies come from hash-pinned lock files (python -m devtools.lock writes them from
# pyproject.toml): every file pip installs is checked against its sha256, nothing unlisted is
# installed. no-deps.txt holds pip, the build tools and the silero-vad wheel (for its model file
# only: its metadata requires torch, which the ONNX model does not need). The project itself
# is installed from the tree, without dependencies. The stamp covers pyproject.toml and the locks.
hash=$(cat pyproject.toml requirements/*.txt | sha256sum | cut -c1-16)
stamp=".venv/.deps-$hash"

if [ ! -x .venv/bin/python ]; then
  echo "creating .venv"
  "$PYTHON" -m venv .venv
fi
if [ ! -f "$stamp" ]; then
  echo "installing dependencies into .venv (hash-checked: requirements/lock.txt)"
  pip=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
  "${pip[@]}" --require-hashes --no-deps -r requirements/no-deps.txt
  "${pip[@]}" --require-hashes --no-deps -r requirements/lock.txt
  "${pip[@]}" --no-deps --no-build-isolation -e .
  rm -f .venv/.deps-*
  touch "$stamp"
fi
