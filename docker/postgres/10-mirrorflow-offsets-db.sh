#!/usr/bin/env bash
# Run by the postgres image on its first start only (an empty data volume), as the superuser that
# POSTGRES_USER names: the offsets database of mirrorflow (mirrorflow.offsets.db.url in
# config/compose/mm2.properties) next to Airflow's metadata database, owned by a login role of its
# own, so that neither application can touch the other's tables. mirrorflow creates its tables on
# first use. The password comes from the environment and reaches SQL as a quoted psql variable.
set -eo pipefail
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
  -v password="${MIRROR_OFFSETS_DB_PASSWORD:?set MIRROR_OFFSETS_DB_PASSWORD for the postgres service}" <<'SQL'
CREATE ROLE mirrorflow LOGIN PASSWORD :'password';
CREATE DATABASE mirrorflow OWNER mirrorflow;
SQL
