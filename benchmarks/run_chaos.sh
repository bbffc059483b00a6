#!/usr/bin/env bash
# The chaos soak: the demo ensemble and single models under load
# from ensemble-loadgen while a killer SIGKILLs or SIGSTOPs a random model
# host every few seconds (and once makes the lying host lie, when
# build/bin/ensemble-lying-host is built).
#
#   benchmarks/run_chaos.sh [MINUTES]     (default 30; CI runs 1)
#
# Builds nothing: it checks that $BIN (default build/bin) has
# ensemble-server, ensemble-model-host, ensemble-make-demo and
# ensemble-loadgen (scripts/build.sh makes them). Needs Debian's python3 with
# python3-torch (for the echo models). Extra flags go to
# benchmarks/chaos/chaos.py (--seed N, --gap-s LO:HI, ...; see its --help).
#
# Prints the report and writes it to $CHAOS_OUT (default build/benchmarks)
# as chaos-<date>.md, beside a folder with the logs and the loadgen JSON.
# Exit 0: every must-be-zero figure is zero (hung and unanswered calls, fd,
# memfd and /dev/shm leaks, host processes left) and the router's RSS grew
# under 5%; 1 otherwise (the report says which); 2: something is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${1:-30}
[ $# -gt 0 ] && shift
if ! [[ "$MINUTES" =~ ^[0-9]+([.][0-9]+)?$ ]]; then
  echo "run_chaos.sh: MINUTES must be a number, got '$MINUTES'" >&2
  exit 2
fi
BIN=${BIN:-build/bin}
for b in ensemble-server ensemble-model-host ensemble-make-demo ensemble-loadgen; do
  if [ ! -x "$BIN/$b" ]; then
    echo "run_chaos.sh: $BIN/$b is missing: build it first (scripts/build.sh)" >&2
    exit 2
  fi
done
exec /usr/bin/python3 benchmarks/chaos/chaos.py --minutes "$MINUTES" --bin "$BIN" \
  --out "${CHAOS_OUT:-build/benchmarks}" "$@"
