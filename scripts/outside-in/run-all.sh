#!/bin/bash
# Run outside-in scenarios one after another against the broker that KOMPAKT_BROKER / KOMPAKT_ADMIN name (and
# KOMPAKT_STOP_CMD / KOMPAKT_START_CMD for the restarting ones), one output file per scenario in OUTDIR, so that
# two builds' answers can be compared with compare.sh.
#   NODE_PATH=/tmp/kjs/node_modules scripts/outside-in/run-all.sh OUTDIR [scenario ...]
# Without scenario names it runs those that need neither Spark nor thousands of partitions.
set -u
out=${1:?usage: run-all.sh OUTDIR [scenario ...]}; shift
here=$(cd "$(dirname "$0")" && pwd)
scenarios=("$@")
if [ ${#scenarios[@]} -eq 0 ]; then
  scenarios=(admin produce timestamps misc offsets fetchsize logappendtime latency policy-switch compaction
             gzip-compact retention retention-active delete-live groups slow-member transactions)
fi
mkdir -p "$out"
for s in "${scenarios[@]}"; do
  (cd "$here" && timeout "${KOMPAKT_SCENARIO_TIMEOUT:-300}" node "$s.js") > "$out/$s.txt" 2>&1
  echo "rc=$?" >> "$out/$s.txt"
  echo "$s: $(tail -n 1 "$out/$s.txt")"
done
