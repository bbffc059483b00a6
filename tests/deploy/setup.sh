#!/usr/bin/env bash
# Installs tests/deploy's pinned npm packages (package-lock.json) into
# tests/deploy/node_modules with `npm ci`, unless the lock installed there
# last is this one. Run by ctest as test_deploy's fixture setup, so a fresh
# clone needs nothing else than node and npm (scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")"
command -v node >/dev/null || { echo "setup: node not found (scripts/install-deps.sh installs it)" >&2; exit 1; }
command -v npm >/dev/null || { echo "setup: npm not found (scripts/install-deps.sh installs it)" >&2; exit 1; }
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ -f node_modules/.es-lock-sha256 ] && [ "$(cat node_modules/.es-lock-sha256)" = "$want" ]; then
  echo "setup: node_modules matches package-lock.json"
  exit 0
fi
npm ci --no-audit --no-fund --loglevel=error
echo "$want" > node_modules/.es-lock-sha256
echo "setup: installed $(ls node_modules | wc -l) packages from package-lock.json"
