#!/usr/bin/env bash
# The static checks: ruff (lint and format), mypy, and the package's import rules (import-linter,
# contracts in pyproject.toml). `make lint` runs this; so does scripts/test.sh before the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD/include${PYTHONPATH:+:$PYTHONPATH}
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/lint-imports --no-cache
