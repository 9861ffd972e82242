#!/bin/bash
# How much of each row's gap a controller that must survive unannounced work can close at most:
# every run of RUNS (thermal/runs.sh) with `--unannounced-oracle`, at the plant's limit
# (CEILING=stock-peak for stock's peak, CEILING=both for both), seed 1 (SEED=N for another).
# Prints one row per run (stock, oracle, the oracle kept to survive unannounced work, predictive,
# and the shares of the last two), then counts, per ceiling, the rows with a gap to close: where that oracle
# reaches 90 %, where the predictive controller does, and where only the oracle does (what the
# controller leaves that foresight of the arrivals would not be needed for). Needs a built
# `lucebox` (LUCEBOX=path, default target/release/lucebox) and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
LUCEBOX=${LUCEBOX:-target/release/lucebox}
SEED=${SEED:-1}
CEILING=${CEILING:-limit}
source thermal/runs.sh
rows=$(mktemp)
trap 'rm -f "$rows"' EXIT
each_run | while read -r plant trace ceiling; do
  [ "$CEILING" = both ] || [ "$CEILING" = "$ceiling" ] || continue
  bench_run "$plant" "$trace" "$ceiling" "$SEED" --unannounced-oracle |
    PLANT=$plant TRACE=$trace CEIL=$ceiling python3 -c '
import json, os, sys
r = json.load(sys.stdin)["controllers"]
print(json.dumps({"plant": os.environ["PLANT"], "trace": os.environ["TRACE"], "ceiling": os.environ["CEIL"],
                  **{k: {"mean": v["mean_duty_pct"], "share": v["share_of_achievable_pct"], "over": v["seconds_over_limit"]}
                     for k, v in r.items()}}))'
done >"$rows"
python3 - "$rows" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
fmt = lambda v: "-" if v is None else "%.1f" % v
print("| plant | trace | ceiling | stock % | oracle % | oracle-unannounced % | predictive % | its share % | predictive share % |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rows:
    u, p = r["oracle-unannounced"], r["predictive"]
    print("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (r["plant"], r["trace"], r["ceiling"], fmt(r["stock"]["mean"]),
          fmt(r["oracle"]["mean"]), fmt(u["mean"]), fmt(p["mean"]), fmt(u["share"]), fmt(p["share"])))
pooled = lambda rows, k: 100 * sum(r["stock"]["mean"] - r[k]["mean"] for r in rows) / max(
    1e-9, sum(r["stock"]["mean"] - r["oracle"]["mean"] for r in rows))
print()
for ceiling in dict.fromkeys(r["ceiling"] for r in rows):
    runs = [r for r in rows if r["ceiling"] == ceiling]
    gap = [r for r in runs if r["oracle-unannounced"]["share"] is not None]
    bound = [r for r in gap if r["oracle-unannounced"]["share"] >= 90]
    pred = [r for r in gap if r["predictive"]["share"] >= 90]
    left = [r for r in bound if r["predictive"]["share"] < 90]
    over = [r for r in runs if r["oracle-unannounced"]["over"] > 0]
    print(f"at {ceiling}: {len(runs)} runs, {len(gap)} with a gap from stock to the oracle; the oracle kept to survive "
          f"unannounced work reaches 90 % on {len(bound)} (pooled {pooled(gap, 'oracle-unannounced'):.1f} %), the "
          f"predictive controller on {len(pred)} (pooled {pooled(gap, 'predictive'):.1f} %); the oracle does and the "
          f"controller does not on {len(left)}; runs where that oracle went over: {len(over)}")
PY
