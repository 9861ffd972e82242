#!/usr/bin/env bash
# Installs what the web tests and the web load run need: Debian's chromium and chromedriver (the
# browser test), wrk (ci/web-load.sh), and the pinned gguf package (ci/make-tiny-model.py).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/pins.env"

missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
command -v wrk >/dev/null || missing+=(wrk)
command -v python3 >/dev/null || missing+=(python3 python3-pip python3-numpy)
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if ! python3 -c "import importlib.metadata as m, sys; sys.exit(m.version('gguf') != '$GGUF_VERSION')" 2>/dev/null; then
  python3 -m pip install --quiet --break-system-packages "gguf==$GGUF_VERSION"
fi
