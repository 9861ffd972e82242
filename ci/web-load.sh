#!/usr/bin/env bash
# Load run of the status API: `lucebox web serve` (detection of the captured Lucebox tree, its 1 Hz loop
# updating the status every second) under wrk on /api/v1/status. Prints wrk's figures and how
# late the 1 Hz loop woke. Usage: ci/web-load.sh [LUCEBOX_BIN] [SECONDS] [CONNECTIONS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../target/release/lucebox}
seconds=${2:-15}
connections=${3:-32}
port=${LUCEBOX_WEB_LOAD_PORT:-18095}
state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT

LUCEBOX_STATE_DIR=$state LUCEBOX_WEB__PORT=$port LUCEBOX_LOG=warn \
  LUCEBOX_ROOT="$here/../tests/fixtures/hosts/lucebox-r9700-strix" \
  "$bin" web serve --duration $((seconds + 4)) &
server=$!
for _ in $(seq 50); do
  curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && break
  sleep 0.1
done
echo "status body: $(curl -s "http://127.0.0.1:$port/api/v1/status" | wc -c) bytes; $(nproc) CPUs; load average $(cut -d' ' -f1-3 /proc/loadavg)"
wrk -t"${WRK_THREADS:-2}" -c"$connections" -d"${seconds}s" --latency "http://127.0.0.1:$port/api/v1/status"
wait "$server"
