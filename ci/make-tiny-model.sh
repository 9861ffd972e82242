#!/usr/bin/env bash
# Writes the tiny random-weight test model and prints its path (the only line on stdout).
#   bash ci/make-tiny-model.sh [OUT.gguf]
# Default OUT: $LUCEBOX_CACHE/models/lucebox-tiny.gguf. Installs the pinned gguf package when
# missing, and checks the file against the pinned sha256 so a changed generator or gguf is caught.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/pins.env"

cache=${LUCEBOX_CACHE:-/var/cache/lucebox-ci}
out=${1:-$cache/models/lucebox-tiny.gguf}

verify() { echo "$TINY_MODEL_SHA256  $1" | sha256sum -c --quiet - >/dev/null 2>&1; }

if [ -f "$out" ] && verify "$out"; then
  echo "$out"
  exit 0
fi

installed=$(python3 -c 'from importlib.metadata import version; print(version("gguf"))' 2>/dev/null || true)
if [ "$installed" != "$GGUF_VERSION" ]; then
  echo "make-tiny-model: installing gguf==$GGUF_VERSION (found '${installed:-none}')" >&2
  python3 -m pip install --quiet "gguf==$GGUF_VERSION" >&2
fi

mkdir -p "$(dirname "$out")"
python3 "$here/make-tiny-model.py" "$out"
if ! verify "$out"; then
  echo "make-tiny-model: $out has sha256 $(sha256sum "$out" | cut -d' ' -f1), pinned $TINY_MODEL_SHA256" >&2
  echo "make-tiny-model: update TINY_MODEL_SHA256 in ci/pins.env only if the generator changed on purpose" >&2
  exit 1
fi
echo "$out"
