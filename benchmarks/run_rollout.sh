#!/usr/bin/env bash
# Rollouts under load: five new versions of every demo member,
# through poll mode and through explicit loads, while ensemble-loadgen keeps
# demo_ensemble busy at concurrency 16. See benchmarks/rollout/rollout.py.
#
#   benchmarks/run_rollout.sh [--rounds N] [--concurrency N]
#
# Builds nothing: needs build/bin (scripts/build.sh) and build/python (the
# generated stubs). Writes its report to build/benchmarks/rollout-<date>.md.
# Exit 0: no request failed and every member reached its last version.
set -euo pipefail
cd "$(dirname "$0")/.."
exec /usr/bin/python3 benchmarks/rollout/rollout.py --bin "${BIN:-build/bin}" --stubs build/python "$@"
