#!/usr/bin/env bash
# Restarts the dockerd that ci/docker.sh started (tests and the runtime soak use it as a fault).
# Refuses to touch a daemon it did not start.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
log_dir=${LUCEBOX_CI_LOG_DIR:-/tmp/lucebox-ci}
pid_file="$log_dir/dockerd.pid"
[ -f "$pid_file" ] || { echo "restart-dockerd: $pid_file missing: dockerd was not started by ci/docker.sh" >&2; exit 1; }
pid=$(cat "$pid_file")
if kill -0 "$pid" 2>/dev/null; then
  kill -TERM "$pid"
  for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && { echo "restart-dockerd: dockerd $pid did not stop in 30 s" >&2; exit 1; }
fi
bash "$here/docker.sh"
