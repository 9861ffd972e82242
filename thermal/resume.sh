#!/bin/bash
# What a restart keeps: every shipped run (seed SEED, default 1) twice with one state directory,
# the first from the priors, the second resuming what the first learned (`--state-dir`, as a device
# does after a reboot), or with PRIOR_TRACES="chat agent ..." after a warm-up on those traces
# instead of on the run's own. Prints predictive's mean duty, share and headroom under the
# ceiling, cold and warm, per row. Needs a built `lucebox` (LUCEBOX=path) and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
LUCEBOX=${LUCEBOX:-target/release/lucebox}
SEED=${SEED:-1}
source thermal/runs.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "| plant | trace | ceiling | cold: mean % / share % / headroom °C | warm: mean % / share % / headroom °C |"
echo "|---|---|---|---|---|"
each_run | while read -r plant trace ceiling; do
  state="$work/$plant-$trace-$ceiling"
  cold=$(bench_run "$plant" "$trace" "$ceiling" "$SEED" --state-dir "$state")
  if [ -n "${PRIOR_TRACES:-}" ]; then
    rm -rf "$state"
    for prior in $PRIOR_TRACES; do
      bench_run "$plant" "$prior" "$ceiling" "$SEED" --controller predictive --state-dir "$state" >/dev/null
    done
  fi
  warm=$(bench_run "$plant" "$trace" "$ceiling" "$SEED" --state-dir "$state")
  python3 -c '
import json, sys
def row(text):
    r = json.loads(text)
    p = r["controllers"]["predictive"]
    share = p["share_of_achievable_pct"]
    return r["predictive_resumed"], "%.1f / %s / %.2f" % (
        p["mean_duty_pct"], "-" if share is None else "%.1f" % share, r["limit_c"] - p["peak_junction_c"])
(cold_resumed, cold), (warm_resumed, warm) = row(sys.argv[4]), row(sys.argv[5])
assert not cold_resumed and warm_resumed, "the second run must resume the first run'"'"'s state"
print("| %s | %s | %s | %s | %s |" % (sys.argv[1], sys.argv[2], sys.argv[3], cold, warm))' \
    "$plant" "$trace" "$ceiling" "$cold" "$warm"
done
