#!/usr/bin/env bash
# Makes sure a Docker daemon answers on the local socket: installs docker.io when the client or
# daemon is missing, starts `dockerd --bridge=none --iptables=false` in the background when none
# answers (tests use --network host only), and waits for the socket. Idempotent: a running
# daemon is left alone. The daemon's log goes to $LUCEBOX_CI_LOG_DIR (default /tmp/lucebox-ci).
# $LUCEBOX_DOCKERD_FLAGS adds flags to a daemon it starts (a test restarts it with --live-restore).
set -euo pipefail

log_dir=${LUCEBOX_CI_LOG_DIR:-/tmp/lucebox-ci}
socket=${DOCKER_SOCKET:-/var/run/docker.sock}
wait_s=${DOCKER_WAIT_S:-60}

if ! command -v dockerd >/dev/null || ! command -v docker >/dev/null; then
  echo "docker.sh: installing docker.io" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq docker.io >&2
fi

if docker info >/dev/null 2>&1; then
  echo "docker.sh: dockerd already answers on $socket" >&2
  exit 0
fi

mkdir -p "$log_dir"
echo "docker.sh: starting dockerd (log: $log_dir/dockerd.log)" >&2
# setsid: the daemon must outlive this script and the CI step's process group.
# shellcheck disable=SC2086 # the extra flags are words
setsid dockerd --bridge=none --iptables=false --host "unix://$socket" ${LUCEBOX_DOCKERD_FLAGS:-} \
  >>"$log_dir/dockerd.log" 2>&1 </dev/null &
echo $! >"$log_dir/dockerd.pid"

for _ in $(seq 1 $((wait_s * 10))); do
  if docker info >/dev/null 2>&1; then
    echo "docker.sh: dockerd ready" >&2
    exit 0
  fi
  sleep 0.1
done
echo "docker.sh: dockerd did not answer within ${wait_s}s; last log lines:" >&2
tail -n 30 "$log_dir/dockerd.log" >&2 || true
exit 1
