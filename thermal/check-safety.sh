#!/bin/bash
# Safety check of the predictive controller beyond the table's seed: every shipped plant x trace,
# at the plant's limit and at --ceiling stock-peak, for each seed in SEEDS (default 1-8).
# Prints each run over its ceiling (seconds and amount, and how far under it the oracle kept for
# unannounced work peaks on the same run), then the smallest headroom (ceiling − predictive's peak
# junction) and its run. Needs a built `lucebox` (LUCEBOX=path) and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
LUCEBOX=${LUCEBOX:-target/release/lucebox}
SEEDS=${SEEDS:-"1 2 3 4 5 6 7 8"}
source thermal/runs.sh
rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
for seed in $SEEDS; do
  each_run | while read -r plant trace ceiling; do
    bench_run "$plant" "$trace" "$ceiling" "$seed" --controller predictive | python3 -c '
import json, sys
r = json.load(sys.stdin); p = r["controllers"]["predictive"]
print(sys.argv[1], r["limit_c"] - p["peak_junction_c"], p["seconds_over_limit"])' "$plant/$trace/$ceiling/seed$seed"
  done
done >"$rows"
# The oracle kept for unannounced work knows the plant exactly and keeps room only for what the
# queue cannot show. Near 0 on a run over, the least duty that survives that work leaves nothing
# for a learned model's or a 1 °C sensor's error there; well above it, the controller misjudged.
unannounced_headroom() {
  bench_run "$1" "$2" "$3" "$4" --controller oracle --unannounced-oracle | python3 -c '
import json, sys
r = json.load(sys.stdin)
print("%.2f" % (r["limit_c"] - r["controllers"]["oracle-unannounced"]["peak_junction_c"]))'
}
# A run is over its ceiling where it spent time over it or peaked above it: those alone get the
# oracle's headroom, and the summary below reads "over" from it ("-" elsewhere).
while read -r run headroom seconds; do
  if awk -v h="$headroom" -v s="$seconds" 'BEGIN { exit !(s > 0 || h < 0) }'; then
    IFS=/ read -r plant trace ceiling seed <<<"$run"
    printf '%s %s %s %s\n' "$run" "$headroom" "$seconds" "$(unannounced_headroom "$plant" "$trace" "$ceiling" "${seed#seed}")"
  else
    printf '%s %s %s -\n' "$run" "$headroom" "$seconds"
  fi
done <"$rows" | python3 -c '
import sys
rows = [l.split() for l in sys.stdin]
over = [r for r in rows if r[3] != "-"]
for r in over:
    print("over: %s %.1f s, %.2f °C (oracle-unannounced: %s °C under)" % (r[0], float(r[2]), -float(r[1]), r[3]))
m = min(rows, key=lambda r: float(r[1]))
print("runs %d, over %d, min headroom %.2f °C (%s)" % (len(rows), len(over), float(m[1]), m[0]))
for c in ("limit", "stock-peak"):
    s = [r for r in rows if "/%s/" % c in r[0]]
    if s:
        m = min(s, key=lambda r: float(r[1]))
        print("  at %s: min headroom %.2f °C (%s)" % (c, float(m[1]), m[0]))
'
