#!/usr/bin/env bash
# Builds one engine variant of the fat image from a llama.cpp source tree.
#   engine/recipes/build.sh VARIANT SRC OUT      build; installs OUT/llama-server and OUT/BUILD-INFO
#   engine/recipes/build.sh --print-flags VARIANT  the CMake flags of VARIANT, one per line
# VARIANT: cpu | cuda | rocm | vulkan. SRC: a llama.cpp tree at LLAMA_CPP_COMMIT (upstream.env).
# JOBS (default nproc) sets build parallelism; BUILD_DIR (default a temp dir) keeps the CMake tree.
# Used by ci/build-engine.sh (cpu) and by the release Dockerfile (all variants).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/upstream.env"

die() { echo "recipes/build.sh: $*" >&2; exit 1; }

# Flags every variant shares. GGML_NATIVE=OFF: a binary tuned to the build machine's CPU would crash
# on another one. The UI and curl/openssl are off: no downloads at build time, no network at run time.
common_flags() {
  printf '%s\n' \
    -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
    "-DLLAMA_BUILD_NUMBER=$LLAMA_CPP_BUILD_NUMBER" "-DLLAMA_BUILD_COMMIT=$LLAMA_CPP_COMMIT"
}

# SASS (`-real`) for every listed arch, plus PTX (`-virtual`) of the newest so later GPUs can JIT it.
cuda_architectures() {
  local arch out=""
  IFS=';' read -ra archs <<<"$CUDA_SASS_ARCHS"
  for arch in "${archs[@]}"; do out+="${arch}-real;"; done
  echo "${out}${CUDA_PTX_ARCH}-virtual"
}

require_variant() {
  case "$1" in
    cpu | cuda | rocm | vulkan) ;;
    *) die "unknown variant '$1' (cpu, cuda, rocm, vulkan)" ;;
  esac
}

variant_flags() {
  common_flags
  case "$1" in
    cpu) ;;
    cuda) printf '%s\n' -DGGML_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=$(cuda_architectures)" ;;
    # AMDGPU_TARGETS is the name older llama.cpp reads, GPU_TARGETS the current one: set both.
    rocm) printf '%s\n' -DGGML_HIP=ON "-DAMDGPU_TARGETS=$ROCM_GFX_TARGETS" "-DGPU_TARGETS=$ROCM_GFX_TARGETS" ;;
    vulkan) printf '%s\n' -DGGML_VULKAN=ON ;;
  esac
}

# The toolchain a variant needs, checked before a long configure fails halfway.
check_toolchain() {
  command -v cmake >/dev/null || die "cmake missing"
  case "$1" in
    cuda) command -v nvcc >/dev/null || die "cuda: nvcc missing (CUDA $CUDA_VERSION toolkit)" ;;
    rocm)
      command -v hipconfig >/dev/null || die "rocm: hipconfig missing (ROCm $ROCM_VERSION)"
      local found
      found=$(hipconfig --version 2>/dev/null | cut -d. -f1)
      [ "$found" = "$ROCM_MAJOR" ] || die "rocm: HIP major '$found', recipe pins ROCm $ROCM_MAJOR.x"
      ;;
    vulkan) command -v glslc >/dev/null || die "vulkan: glslc missing (shader compiler)" ;;
  esac
}

if [ "${1:-}" = "--print-flags" ]; then
  [ $# -eq 2 ] || die "usage: build.sh --print-flags VARIANT"
  require_variant "$2"
  variant_flags "$2"
  exit 0
fi
[ $# -eq 3 ] || die "usage: build.sh VARIANT SRC OUT | build.sh --print-flags VARIANT"
variant=$1 src=$2 out=$3
require_variant "$variant"
mapfile -t flags < <(variant_flags "$variant")
[ -f "$src/CMakeLists.txt" ] || die "no llama.cpp tree at $src (CMakeLists.txt missing)"
check_toolchain "$variant"

build=${BUILD_DIR:-}
if [ -z "$build" ]; then
  build=$(mktemp -d)
  trap 'rm -rf "$build"' EXIT
fi
if [ "$variant" = rocm ]; then
  # HIP sources go through ROCm's clang, found from hipconfig.
  HIPCXX="$(hipconfig -l)/clang" HIP_PATH="$(hipconfig -R)"
  export HIPCXX HIP_PATH
fi

echo "recipes/build.sh: configuring llama.cpp $LLAMA_CPP_COMMIT ($variant)" >&2
cmake -S "$src" -B "$build" "${flags[@]}" >&2
jobs=${JOBS:-$(nproc)}
echo "recipes/build.sh: building llama-server ($variant) with $jobs jobs" >&2
start=$(date +%s)
cmake --build "$build" --target llama-server -j"$jobs" >&2
echo "recipes/build.sh: built in $(($(date +%s) - start)) s" >&2

mkdir -p "$out"
install -m 0755 "$build/bin/llama-server" "$out/llama-server.tmp"
mv "$out/llama-server.tmp" "$out/llama-server"
{
  echo "variant=$variant"
  echo "engine=llama-server"
  echo "llama_cpp_commit=$LLAMA_CPP_COMMIT"
  case "$variant" in
    cuda) echo "cuda_version=$CUDA_VERSION" ;;
    rocm) echo "rocm_version=$ROCM_VERSION"; echo "rocm_major=$ROCM_MAJOR" ;;
  esac
  echo "cmake_flags=${flags[*]}"
} >"$out/BUILD-INFO"
echo "$out/llama-server"
