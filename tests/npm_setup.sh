#!/usr/bin/env bash
# Installs a test folder's pinned npm packages (its package-lock.json) into
# its node_modules with `npm ci`, unless the lock installed there last is
# this one. Run by ctest as the fixture setup of the tests that use node
# (tests/deploy, tests/integration/tracing), so a fresh clone needs nothing else than
# node and npm (scripts/install-deps.sh).
#
#   tests/npm_setup.sh FOLDER
set -euo pipefail
[ $# -eq 1 ] && [ -f "$1/package-lock.json" ] || { echo "usage: $0 FOLDER (a folder with a package-lock.json)" >&2; exit 2; }
cd "$1"
command -v node >/dev/null || { echo "setup: node not found (scripts/install-deps.sh installs it)" >&2; exit 1; }
command -v npm >/dev/null || { echo "setup: npm not found (scripts/install-deps.sh installs it)" >&2; exit 1; }
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ -f node_modules/.es-lock-sha256 ] && [ "$(cat node_modules/.es-lock-sha256)" = "$want" ]; then
  echo "setup: $1/node_modules matches package-lock.json"
  exit 0
fi
npm ci --no-audit --no-fund --loglevel=error
echo "$want" > node_modules/.es-lock-sha256
echo "setup: installed $(ls node_modules | wc -l) packages from $1/package-lock.json"
