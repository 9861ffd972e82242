#!/bin/bash
# Reproduces the results table of thermal/README.md: every shipped plant x trace, at the plant's
# limit and at --ceiling stock-peak, seed 1 (SEED=N for another). Needs a built `lucebox`
# (LUCEBOX=path, default target/release/lucebox) and python3 for the table.
set -euo pipefail
cd "$(dirname "$0")/.."
LUCEBOX=${LUCEBOX:-target/release/lucebox}
SEED=${SEED:-1}
echo "| plant | trace | ceiling | over s | pred mean % | stock | target | oracle | share % | vs stock % | chg/min pred/stock/target | quiet % pred/oracle | peak °C pred/stock | MAE30 °C | goals met |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
source thermal/runs.sh
each_run | while read -r plant trace ceiling; do
  bench_run "$plant" "$trace" "$ceiling" "$SEED" | PLANT=$plant TRACE=$trace CEIL=$ceiling python3 -c '
import json, os, sys
r = json.load(sys.stdin)["controllers"]
p, s, t, o = r["predictive"], r["stock"], r["target"], r["oracle"]
share = p["share_of_achievable_pct"]
goals = {
    "over": p["seconds_over_limit"] == 0,
    # Where the oracle does not beat stock there is no gap to close: no louder than stock then.
    "share": share >= 90 if share is not None else p["mean_duty_pct"] <= s["mean_duty_pct"] + 0.05,
    "mean<target": p["mean_duty_pct"] < t["mean_duty_pct"] or p["mean_duty_pct"] <= o["mean_duty_pct"] + 0.05,
    # A fan that never changes duty meets it even where stock never changes either.
    "changes": (p["duty_changes_per_min"] < s["duty_changes_per_min"] or p["duty_changes_per_min"] == 0)
    and p["duty_changes_per_min"] <= t["duty_changes_per_min"],
}
if os.environ["TRACE"] == "chat":
    goals["quiet"] = p["quiet_time_pct"] >= o["quiet_time_pct"] - 5
failed = [k for k, ok in goals.items() if not ok]
fmt = lambda v: "-" if v is None else "%.1f" % v
print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.2f/%.2f/%.2f | %.0f/%.0f | %.1f/%.1f | %s | %s |" % (
    os.environ["PLANT"], os.environ["TRACE"], os.environ["CEIL"], fmt(p["seconds_over_limit"]),
    fmt(p["mean_duty_pct"]), fmt(s["mean_duty_pct"]), fmt(t["mean_duty_pct"]), fmt(o["mean_duty_pct"]),
    fmt(share), fmt(p["reduction_vs_stock_pct"]), p["duty_changes_per_min"], s["duty_changes_per_min"],
    t["duty_changes_per_min"], p["quiet_time_pct"], o["quiet_time_pct"], p["peak_junction_c"], s["peak_junction_c"],
    fmt(p["prediction_mae_30s_c"]), "all" if not failed else "no: " + ", ".join(failed)))
'
done
