#!/usr/bin/env bash
# Builds the CPU-only llama.cpp `llama-server` that the tests and the CPU image run.
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
  python3 -m pip download --quiet --no-deps --no-binary :all: --no-build-isolation \
    "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$work" >&2 ||
    python3 -m pip download --quiet --no-deps "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$work" >&2
fi
echo "$LLAMA_CPP_PYTHON_SHA256  $tarball" | sha256sum -c --quiet - >&2 ||
  { echo "build-engine: sha256 mismatch for $tarball" >&2; exit 1; }
mkdir -p "$cache/sdist" && cp -n "$tarball" "$cache/sdist/" 2>/dev/null || true

tar -C "$work" -xzf "$tarball"
src="$work/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"
[ -f "$src/CMakeLists.txt" ] || { echo "build-engine: no llama.cpp tree in the sdist at $src" >&2; exit 1; }

echo "build-engine: configuring llama.cpp $LLAMA_CPP_COMMIT (CPU only)" >&2
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DGGML_NATIVE=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_NUMBER="$LLAMA_CPP_BUILD_NUMBER" -DLLAMA_BUILD_COMMIT="$LLAMA_CPP_COMMIT" >&2
echo "build-engine: building llama-server with $(nproc) jobs (about 11 minutes on 2 cores)" >&2
start=$(date +%s)
cmake --build "$work/build" --target llama-server -j"$(nproc)" >&2
echo "build-engine: built in $(( $(date +%s) - start )) s" >&2
mkdir -p "$out_dir"
install -m 0755 "$work/build/bin/llama-server" "$out.tmp"
mv "$out.tmp" "$out"
echo "$out"
