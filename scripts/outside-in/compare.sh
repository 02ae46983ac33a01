#!/bin/bash
# Diff two run-all.sh output folders (say, a broker from main and one from an older commit) after masking what differs
# from run to run by design: the random suffix uniq() adds to names, millisecond timestamps, UUIDs, ports, cluster ids
# log.dirs and durations. What is left is a difference in the broker's answers, or a race a scenario does not pin down
# (e.g. the background cleaner cleaning before POST /v1/compact does, so the POST answers "skipped").
#   scripts/outside-in/compare.sh OLD_OUTDIR NEW_OUTDIR
set -u
old=${1:?usage: compare.sh OLD_OUTDIR NEW_OUTDIR}; new=${2:?usage: compare.sh OLD_OUTDIR NEW_OUTDIR}
mask() {
  sed -E -e 's/-[a-z0-9]{8,10}[0-9]{0,3}/-UNIQ/g' -e 's/\b1[0-9]{12}\b/TS/g' \
    -e 's/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/UUID/g' \
    -e 's/(127\.0\.0\.1:|"port":)[0-9]+/\1PORT/g' -e 's/"clusterId":"[0-9a-f]+"/"clusterId":ID/g' \
    -e 's/(duration_s|mb_per_s|started_ms)(\\?"): ?[0-9.e-]+/\1\2:X/g' -e 's/L[a-z0-9]*l{100,}/LONG/g' \
    -e 's/(after|in|took|at) [0-9]+( ?ms)?/\1 N\2/g' -e 's#"log.dirs","[^"]*"#"log.dirs",DIR#' "$1"
}
status=0
for f in "$new"/*.txt; do
  b=$(basename "$f")
  if [ ! -f "$old/$b" ]; then echo "=== $b: only in $new"; status=1; continue; fi
  if ! d=$(diff <(mask "$old/$b") <(mask "$f")); then echo "=== $b"; echo "$d"; status=1; fi
done
exit $status
