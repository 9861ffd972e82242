#!/bin/bash
# CPU cost of the fan control loop inside `lucebox run`, under engine load.
#   thermal/loop-cpu.sh [SECONDS]   (default 300)
# The host is a copy of the captured R9700 tree (tests/fixtures/hosts/r9700): the loop drives the
# copy's fan files. The CPU llama-server with the tiny model stands in for the Vulkan build, under
# a copy of the tiny-cpu-test profile that names the vulkan backend. Two clients send chat
# completions back to back. Prints the loop's own CPU account (/api/v1/thermal) and, for context,
# the whole supervisor's, with what the status said about the fan (`why`, sampled every 5 s);
# then, after the supervisor stopped, the thermal events and the learned state it left in the
# state directory (its files, and the model its forecast was learned with). With
# THERMAL_PRIORS=FILE that file is signed and applied (`lucebox ota`) as the active profile set's
# thermal/priors.toml; ENGINE_PORT and WEB_PORT choose the ports. Needs LUCEBOX (default
# target/release/lucebox), LUCEBOX_LLAMA_SERVER and LUCEBOX_TINY_MODEL (exported by ci/test.sh's
# set-up), curl and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-300}
LUCEBOX=$(realpath "${LUCEBOX:-target/release/lucebox}")
: "${LUCEBOX_LLAMA_SERVER:?set LUCEBOX_LLAMA_SERVER to a CPU llama-server}"
: "${LUCEBOX_TINY_MODEL:?set LUCEBOX_TINY_MODEL to the tiny GGUF model}"

work=$(mktemp -d)
supervisor=
cleanup() {
  if [ -n "$supervisor" ]; then
    kill -TERM "$supervisor" 2>/dev/null || true
    wait "$supervisor" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

cp -a tests/fixtures/hosts/r9700 "$work/root"
mkdir -p "$work/engines/vulkan/bin" "$work/models" "$work/profiles" "$work/state"
ln -s "$(realpath "$LUCEBOX_LLAMA_SERVER")" "$work/engines/vulkan/bin/llama-server"
cp "$LUCEBOX_TINY_MODEL" "$work/models/tiny-llama.gguf"
sed 's/^backends = \["cpu"\]/backends = ["vulkan"]/' profiles/tiny-cpu-test.toml > "$work/profiles/tiny-vulkan-test.toml"
export LUCEBOX_ROOT="$work/root" LUCEBOX_PROFILES_DIR="$work/profiles" LUCEBOX_ENGINES_DIR="$work/engines" \
  LUCEBOX_MODELS_DIR="$work/models" LUCEBOX_STATE_DIR="$work/state"
if [ -n "${THERMAL_PRIORS:-}" ]; then
  # Installed as a box gets priors: a profile set signed (with a test key) and applied over the air.
  mkdir -p "$work/set/thermal"
  echo "version = 1" > "$work/set/manifest.toml"
  cp "$THERMAL_PRIORS" "$work/set/thermal/priors.toml"
  { "$LUCEBOX" ota publish --set "$work/set" --out "$work/repo" --root "$work/repo/root.json" \
      --key tests/fixtures/ota/keys/a.pem &&
    "$LUCEBOX" ota apply --repo "$work/repo" --trusted-root "$work/repo/root.json" --health-cmd /bin/true
  } > "$work/ota.log" 2>&1 || { cat "$work/ota.log" >&2; echo "installing $THERMAL_PRIORS failed" >&2; exit 1; }
fi
# Ports from the caller (the tests hand out ports no other test gets), else any two free ones.
if [ -z "${ENGINE_PORT:-}" ] || [ -z "${WEB_PORT:-}" ]; then
  read -r ENGINE_PORT WEB_PORT < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*(x.getsockname()[1] for x in s))')
fi
engine_port=$ENGINE_PORT web_port=$WEB_PORT

LUCEBOX_ENGINE__PORT=$engine_port LUCEBOX_WEB__PORT=$web_port LUCEBOX_RUNTIME__MODE=process \
  "$LUCEBOX" run > "$work/run.log" 2>&1 </dev/null &
supervisor=$!

api() { curl -sf -m 5 "http://127.0.0.1:$web_port/api/v1/$1"; }
ready() { api engines 2>/dev/null | grep -q '"state":"ready"'; }
driving() { api thermal 2>/dev/null | grep -q '"mode":"predictive"'; }
for _ in $(seq 120); do
  ready && driving && break
  sleep 0.5
done
ready || { tail -20 "$work/run.log"; echo "engine not ready" >&2; exit 1; }
driving || { api thermal; echo; echo "the loop is not driving the fan" >&2; exit 1; }

echo "load: 2 clients for $seconds s against 127.0.0.1:$engine_port" >&2
ticks_per_s=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$supervisor/stat"; }
start_ticks=$(cpu_ticks) start_s=$SECONDS
end=$((SECONDS + seconds))
client() {
  local n=0
  while [ $SECONDS -lt $end ]; do
    curl -sf -m 60 "http://127.0.0.1:$engine_port/v1/chat/completions" -H 'content-type: application/json' \
      -d '{"messages":[{"role":"user","content":"Tell a long story about fans and heat."}],"max_tokens":96}' \
      > /dev/null && n=$((n + 1))
  done
  echo "$n"
}
client > "$work/c1" &
first=$!
client > "$work/c2" &
second=$!
# What the status page says about the fan, every 5 s of the load.
(while [ $SECONDS -lt $end ]; do api thermal >> "$work/whys.jsonl" 2>/dev/null || true; echo >> "$work/whys.jsonl"; sleep 5; done) &
sampler=$!
wait "$first" "$second" "$sampler"
requests=$(( $(cat "$work/c1") + $(cat "$work/c2") ))
supervisor_pct=$(python3 -c "print(round(100 * ($(cpu_ticks) - $start_ticks) / $ticks_per_s / max(1, $SECONDS - $start_s), 3))")
api thermal > "$work/thermal.json"
api events > "$work/events.json"
kill -TERM "$supervisor" && wait "$supervisor" || true
supervisor=
ls "$work/state/thermal" > "$work/learned" 2>/dev/null || true
SECONDS_RUN=$seconds REQUESTS=$requests SUPERVISOR_PCT=$supervisor_pct WORK=$work python3 -c '
import json, os
work = os.environ["WORK"]
thermal = json.load(open(work + "/thermal.json"))
events = [e["message"] for e in json.load(open(work + "/events.json")) if e.get("source") == "thermal"]
learned = open(work + "/learned").read().split()
forecasts = [json.load(open(work + "/state/thermal/" + f)) for f in learned if f.endswith(".forecast.json")]
whys = {}
for line in open(work + "/whys.jsonl"):
    for t in (json.loads(line).values() if line.strip() else []):
        whys[t.get("why")] = whys.get(t.get("why"), 0) + 1
for id, t in thermal.items():
    print(json.dumps({"device": id, "seconds": int(os.environ["SECONDS_RUN"]), "requests": int(os.environ["REQUESTS"]),
                      "loop_cpu_s": round(t["loop_cpu_s"], 4), "loop_cpu_pct": round(t["loop_cpu_pct"], 4),
                      "supervisor_cpu_pct_during_load": float(os.environ["SUPERVISOR_PCT"]), "mode": t["mode"],
                      "thermal_events": events, "learned_files": learned,
                      "forecast_models": [f.get("model") for f in forecasts], "why_samples": whys}))'
