#!/bin/bash
# The results table's limit rows over many seeds (SEEDS, default 1-16: 256 rows): how many meet
# every goal, then each row that misses one, with its seed and share. Figures of "Where it stands"
# in thermal/README.md. Needs a built `lucebox` (LUCEBOX=path, default target/release/lucebox).
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS=${SEEDS:-$(seq -s ' ' 1 16)}
rows=$(for seed in $SEEDS; do
  SEED=$seed thermal/bench-table.sh | grep '| limit |' | sed "s/^/| seed $seed /"
done)
echo "limit rows meeting every goal: $(grep -c '| all |$' <<<"$rows") of $(wc -l <<<"$rows")"
# Fields: "| seed N", plant, trace, ceiling, over s, four mean duties, share, ..., goals.
grep -v '| all |$' <<<"$rows" | awk -F' [|] ' '{sub(/^[|] /, "", $1); sub(/ [|]$/, "", $NF)
  print "  " $1 ": " $2 ", " $3 ": share " $10 " %, " $NF}' || true
