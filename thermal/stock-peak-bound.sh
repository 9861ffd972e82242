#!/bin/bash
# What any controller can reach at --ceiling stock-peak, seed 1: the oracle (true plant, future
# power known) run again at stock's peak minus a margin. A controller whose junction stays MARGIN
# under the ceiling needs about that oracle's mean duty (the oracle is a near-optimal search, not a
# proof), so its share of the stock -> oracle gap is at most about
# 100 x (stock - oracle at ceiling - MARGIN) / (stock - oracle at ceiling).
# Prints one markdown row per shipped plant x trace, with the predictive controller's own figures
# beside it. Needs a built `lucebox` (LUCEBOX=path, default target/release/lucebox) and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
LUCEBOX=${LUCEBOX:-target/release/lucebox}
MARGINS=${MARGINS:-"0.25 0.5 1"}
source thermal/runs.sh

header="| plant | trace | stock peak °C | stock % | oracle % |"
rule="|---|---|---|---|---|"
for m in $MARGINS; do
  header+=" oracle at −$m °C: mean % / best share % |"
  rule+="---|"
done
echo "$header predictive: mean % / share % / headroom °C |"
echo "$rule---|"

each_run | while read -r plant trace ceiling; do
  [ "$ceiling" = stock-peak ] || continue
  at_peak=$(bench_run "$plant" "$trace" stock-peak 1)
  peak_c=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["limit_c"])' <<<"$at_peak")
  under=()
  for m in $MARGINS; do
    under+=("$(bench_run "$plant" "$trace" limit 1 --controller oracle \
      --ceiling "$(python3 -c "print(round($peak_c - $m, 2))")")")
  done
  python3 - "$plant" "$trace" "$at_peak" "${under[@]}" <<'EOF'
import json, sys
plant, trace, at_peak, under = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4:]
r = at_peak["controllers"]
stock, oracle, pred = r["stock"]["mean_duty_pct"], r["oracle"]["mean_duty_pct"], r["predictive"]
gap = stock - oracle
cells = []
for u in under:
    mean = json.loads(u)["controllers"]["oracle"]["mean_duty_pct"]
    cells.append("%.1f / %s" % (mean, "%.1f" % (100 * (stock - mean) / gap) if gap > 0 else "-"))
share = pred["share_of_achievable_pct"]
print("| %s | %s | %.2f | %.1f | %.1f | %s | %.1f / %s / %.1f |" % (
    plant, trace, at_peak["limit_c"], stock, oracle, " | ".join(cells), pred["mean_duty_pct"],
    "-" if share is None else "%.1f" % share, at_peak["limit_c"] - pred["peak_junction_c"]))
EOF
done
