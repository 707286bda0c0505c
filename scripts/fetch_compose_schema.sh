#!/usr/bin/env bash
# The Compose Specification's JSON schema, for tests/unit/dev/test_compose_file.py, into the git-ignored
# .cache/compose-spec/compose-spec.json (third-party files are fetched, never committed).
#
# Source: the npm registry package dclint (Docker Compose linter), which ships compose-spec's
# schema/compose-spec.json as schemas/compose.schema.json (this version: the upstream schema of
# 2025-07-21, JSON Schema draft-07). Pinned by version and by the sha256 of both the package tarball
# and the schema inside it; a mismatch fails and leaves nothing behind. NPM_CONFIG_REGISTRY (npm's
# own variable) may name a registry mirror: the pins make any source safe.
# Idempotent: does nothing when the stamp and the file's hash say the pinned schema is in place.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGE=dclint
VERSION=3.1.0
TARBALL_SHA256=73fc6079a0408c80c7ccea9e9e5c21c40551afaf15e8c1ee25a5ad6af1ec0414
MEMBER=package/schemas/compose.schema.json
SCHEMA_SHA256=46b7d35f19dd93a05f8fea530291bf84d881c1791ec167ecf0e6fb94e639d496
REGISTRY=${NPM_CONFIG_REGISTRY:-https://registry.npmjs.org}
DEST=.cache/compose-spec
SCHEMA=$DEST/compose-spec.json
STAMP="$PACKAGE@$VERSION $SCHEMA_SHA256"

if [ "$(cat "$DEST/.stamp" 2>/dev/null)" = "$STAMP" ] \
  && echo "$SCHEMA_SHA256  $SCHEMA" | sha256sum --check --status 2>/dev/null; then
  exit 0
fi

echo "setup: fetching the Compose Specification schema ($PACKAGE $VERSION from the npm registry)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
url="${REGISTRY%/}/$PACKAGE/-/$PACKAGE-$VERSION.tgz"
curl -fsSL --retry 3 -o "$tmp/package.tgz" "$url"

check() {  # expected sha256, file, what it is
  local actual
  actual=$(sha256sum "$2" | cut -d' ' -f1)
  if [ "$actual" != "$1" ]; then
    echo "fetch_compose_schema: $3 has sha256 $actual, expected $1 (pinned in $0); nothing installed" >&2
    exit 1
  fi
}
check "$TARBALL_SHA256" "$tmp/package.tgz" "$url"
tar -xzf "$tmp/package.tgz" -C "$tmp" "$MEMBER"
check "$SCHEMA_SHA256" "$tmp/$MEMBER" "$MEMBER of $PACKAGE $VERSION"

mkdir -p "$DEST"
mv "$tmp/$MEMBER" "$SCHEMA"
echo "$STAMP" > "$DEST/.stamp"
