#!/usr/bin/env bash
# Runs the whole test suite (unit, Spark, DAG integrity, integration on real brokers) and the linters.
# pytest's exit code 5 ("no tests collected") is a failure here: a run that tests nothing proves nothing.
set -uo pipefail
cd "$(dirname "$0")/.."
.venv/bin/pytest "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "test.sh: pytest collected no tests: treating as a failure" >&2
  exit 1
fi
exit "$rc"
