#!/usr/bin/env bash
# The whole check: the static checks (scripts/lint.sh) and every test level (unit, Spark, DAG integrity,
# integration on real brokers, Spark and Airflow). Extra arguments go to pytest.
# pytest's exit code 5 ("no tests collected") is a failure here: a run that tests nothing proves nothing.
set -uo pipefail
cd "$(dirname "$0")/.."
mkdir -p .state/test-results
# The tests' temporary files (brokers' logs, SQLite and PostgreSQL databases, Airflow homes, Spark's
# scratch) in memory where the machine has a tmpfs: a SQLite commit costs 2 ms on this disk and 0.06 ms
# there, and the suite's Airflow runs and DR windows commit many thousands. Removed when the tests end.
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
  scratch=$(mktemp -d /dev/shm/mirrorflow-tests.XXXXXX)
  # Open like /tmp: the local PostgreSQL server runs under its own account and must reach its home here.
  chmod 1777 "$scratch"
  trap 'rm -rf "$scratch"' EXIT
  export TMPDIR=$scratch SPARK_LOCAL_DIRS=$scratch
fi
# The static checks run beside the tests: on a fresh clone mypy keeps one core busy for half a minute,
# while the tests' workers start their clusters. Their output follows the tests'; either failing fails.
lint_log=$(mktemp)
bash scripts/lint.sh >"$lint_log" 2>&1 &
lint=$!
# The checkout's modules compiled once, here: with PYTHONDONTWRITEBYTECODE set, every process that
# imports them (Airflow's, the Spark jobs' drivers and workers) would compile them again, about 0.6 s
# of CPU each.
.venv/bin/python -m compileall -q include plugins dags jobs >/dev/null
# The three-node cluster tests (marker ``replicated``) run apart, `make test-replicated`: six broker
# JVMs and their leader elections would take the suite past CI's time. So do more cases of a kind this
# run keeps one case of (marker ``extended``, `make test-extended`).
# Three pytest-xdist workers, a test module to each at a time (its module fixtures stay in one
# process; the longest modules first, as tests/conftest.py orders them, which xdist would otherwise
# reorder by their number of tests): on 2 cores a third worker uses the CPU the
# others leave while they wait on schedulers and DR windows. Each worker starts its own session
# clusters. Every test's duration in the output; every result as JUnit XML for CI.
.venv/bin/pytest -n 3 --dist loadfile --no-loadscope-reorder --durations=0 --junitxml=.state/test-results/junit.xml -m "not (replicated or extended)" "$@"
rc=$?
wait "$lint"
lint_rc=$?
cat "$lint_log"
rm -f "$lint_log"
if [ "$lint_rc" -ne 0 ]; then
  echo "test.sh: the static checks (scripts/lint.sh) failed: see above" >&2
  exit 1
fi
if [ "$rc" -eq 5 ]; then
  echo "test.sh: pytest collected no tests: treating as a failure" >&2
  exit 1
fi
exit "$rc"
