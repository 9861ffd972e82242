#!/usr/bin/env bash
# Installs what the build and the tests need on a fresh Debian machine (run as root). Idempotent:
# packages already present are not fetched again.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/pins.env"

# libclang-dev and librocm-smi-dev: the `rocm` feature's bindgen build and its link to rocm_smi64.
packages=(cmake docker.io busybox-static chromium chromium-driver systemd python3-pip gcc libclang-dev
  librocm-smi-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: apt-get install ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

if ! python3 -c "import gguf, sys; sys.exit(gguf.__version__ != '$GGUF_VERSION')" 2>/dev/null &&
   ! python3 -m pip show gguf 2>/dev/null | grep -qx "Version: $GGUF_VERSION"; then
  echo "install-deps: pip install gguf==$GGUF_VERSION" >&2
  python3 -m pip install --quiet "gguf==$GGUF_VERSION" >&2 ||
    python3 -m pip install --quiet --break-system-packages "gguf==$GGUF_VERSION" >&2
fi
