#!/usr/bin/env bash
# Installs wrk for the web load run (ci/web-load.sh). The web tests themselves need only what
# ci/install-deps.sh installs (chromium, chromium-driver, python3 with gguf).
set -euo pipefail
if ! command -v wrk >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends wrk
fi
