#!/usr/bin/env bash
# ctest `bad_flags`: every binary, given an option it does not have, prints
# one line naming it ("PROGRAM: unknown option '--bogus-flag' (see --help)")
# and exits 2, before it does anything else (no server, no repository, no
# training data needed).
#
#   run_bad_flags_test.sh BINARY...
set -uo pipefail
failed=0
for bin in "$@"; do
  name=$(basename "$bin")
  output=$("$bin" --bogus-flag 2>&1)
  rc=$?
  lines=$(printf '%s\n' "$output" | wc -l)
  want="$name: unknown option '--bogus-flag' (see --help)"
  if [[ $rc -ne 2 || $lines -ne 1 || "$output" != "$want" ]]; then
    echo "FAIL: $name --bogus-flag: exit $rc, $lines line(s):" >&2
    printf '%s\n' "$output" >&2
    echo "  wanted exit 2 and the one line: $want" >&2
    failed=1
  else
    echo "ok: $name --bogus-flag -> exit 2: $output"
  fi
done
exit $failed
