# Common verbs. Everything runs from the repo's own .venv and .cache; `make setup` makes them.
VENV := .venv
PY := $(VENV)/bin/python
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
# The dev tooling (include/mirrorflow_dev) is not part of the installed product: it is imported from here.
export PYTHONPATH := $(CURDIR)/include$(if $(PYTHONPATH),:$(PYTHONPATH))

.PHONY: setup demo airflow test test-unit test-replicated test-extended soak lint format readme-keys bench kafka-up kafka-down kafka-status clean

setup:
	@bash scripts/setup.sh

demo: setup
	@$(PY) scripts/demo.py

# Airflow's UI and scheduler (airflow standalone) on the local clusters, wired as docker-compose.yaml
# wires its Airflow; AIRFLOW_PORT (default 8080). Ctrl-C stops it; the clusters keep running.
airflow: setup
	@$(PY) -m mirrorflow_dev.local_airflow

test: setup
	@bash scripts/test.sh $(PYTEST_ARGS)

# The tests that start nothing (no broker, Spark, Airflow, PostgreSQL, Keycloak, schema registry or
# browser): well under a minute.
test-unit: setup
	$(VENV)/bin/pytest -m "not (kafka or spark or airflow or postgres or oauth or registry or browser or faults)" $(PYTEST_ARGS)

# The tests on three-node clusters (leader changes, node kills and restarts): up to six broker JVMs.
test-replicated: setup
	$(VENV)/bin/pytest -m replicated $(PYTEST_ARGS)

# More cases of kinds make test keeps one case of (kill points of the fault-injection suite): slower
# than make test adds in proof.
test-extended: setup
	$(VENV)/bin/pytest -m extended $(PYTEST_ARGS)

# The fault-injection suite with SOAK_KILLS more random kill points (seed: MIRROR_SOAK_SEED).
soak: setup
	MIRROR_SOAK_KILLS=$(or $(SOAK_KILLS),30) $(VENV)/bin/pytest tests/integration/test_faults.py -s $(PYTEST_ARGS)

bench: setup
	$(PY) bench/run.py $(BENCH_ARGS)

lint: setup
	@bash scripts/lint.sh

format: setup
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# The README's table of MM2 keys, from the key table the config loader uses.
readme-keys: setup
	$(PY) -m mirrorflow_dev.readme_keys

kafka-up: setup
	@$(PY) -m mirrorflow_dev.local_kafka up

kafka-down:
	@$(PY) -m mirrorflow_dev.local_kafka down

kafka-status:
	@$(PY) -m mirrorflow_dev.local_kafka status

clean: kafka-down
	rm -rf .state
