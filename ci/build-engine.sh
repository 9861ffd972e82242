#!/usr/bin/env bash
# Builds the CPU-only llama.cpp `llama-server` that the tests and the CPU image run, with the cpu
# recipe of engine/recipes/build.sh.
# Source: the llama.cpp tree vendored in the llama-cpp-python sdist on PyPI, pinned by version and
# sha256. The binary is cached under $LUCEBOX_CACHE keyed by that sha256, so reruns skip the
# ~11 minute build; a machine without the cache builds it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/pins.env"

cache=${LUCEBOX_CACHE:-/var/cache/lucebox-ci}
out_dir="$cache/llama-server-$LLAMA_CPP_PYTHON_SHA256"
out="$out_dir/llama-server"
if [ -x "$out" ]; then
  echo "$out"
  exit 0
fi

command -v cmake >/dev/null || { echo "build-engine: cmake missing (ci/install-deps.sh installs it)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tarball="$work/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz"
if [ -f "$cache/sdist/$(basename "$tarball")" ]; then
  cp "$cache/sdist/$(basename "$tarball")" "$tarball"
else
  echo "build-engine: downloading llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION sdist" >&2
  # Plain download: the registry carries only the sdist for this version. `--no-binary :all:` would
  # also build the build-backend's own dependencies (CMake) from source.
  python3 -m pip download --quiet --no-deps "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$work" >&2
fi
echo "$LLAMA_CPP_PYTHON_SHA256  $tarball" | sha256sum -c --quiet - >&2 ||
  { echo "build-engine: sha256 mismatch for $tarball" >&2; exit 1; }
mkdir -p "$cache/sdist" && cp -n "$tarball" "$cache/sdist/" 2>/dev/null || true

tar -C "$work" -xzf "$tarball"
src="$work/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"
[ -f "$src/CMakeLists.txt" ] || { echo "build-engine: no llama.cpp tree in the sdist at $src" >&2; exit 1; }

mkdir -p "$out_dir"
# The CPU recipe of the fat image, so tests run the engine the image ships.
bash "$here/../engine/recipes/build.sh" cpu "$src" "$work/out" >/dev/null
install -m 0755 "$work/out/llama-server" "$out.tmp"
cp "$work/out/BUILD-INFO" "$out_dir/BUILD-INFO"
mv "$out.tmp" "$out"
echo "$out"
