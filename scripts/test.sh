#!/usr/bin/env bash
# The whole check: the static checks (scripts/lint.sh) and every test level (unit, Spark, DAG integrity,
# integration on real brokers, Spark and Airflow). Extra arguments go to pytest.
# pytest's exit code 5 ("no tests collected") is a failure here: a run that tests nothing proves nothing.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/lint.sh || exit 1
# Three pytest-xdist workers, a test module to each at a time (its module fixtures stay in one
# process): the suite mostly waits (on JVM and Airflow start-ups, schedulers, DR windows), so a third
# worker still gains on 2 cores. Each worker starts its own session clusters. Every test's duration in the output; every result as
# JUnit XML for CI.
mkdir -p .state/test-results
# The three-node cluster tests (marker ``replicated``) run apart, `make test-replicated`: six broker
# JVMs and their leader elections would take the suite past CI's time.
.venv/bin/pytest -n 3 --dist loadfile --durations=0 --junitxml=.state/test-results/junit.xml -m "not replicated" "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "test.sh: pytest collected no tests: treating as a failure" >&2
  exit 1
fi
exit "$rc"
