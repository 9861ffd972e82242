#!/usr/bin/env bash
# The whole test suite from a fresh machine: installs dependencies, builds the CPU test engine
# (cached by source checksum), the tiny model and the test images, starts dockerd, then runs
# formatting, lints and every test. `.ci/run` calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
step() { echo "== [$(( $(date +%s) - start ))s] $*" >&2; }

step "install dependencies"
bash ci/install-deps.sh

step "build the CPU llama-server (cached by sdist sha256)"
LUCEBOX_LLAMA_SERVER=$(bash ci/build-engine.sh)
export LUCEBOX_LLAMA_SERVER

step "write the tiny test model (pinned sha256)"
LUCEBOX_TINY_MODEL=$(bash ci/make-tiny-model.sh)
export LUCEBOX_TINY_MODEL
# The runtime tests read these names.
export LLAMA_SERVER_BIN=$LUCEBOX_LLAMA_SERVER TINY_MODEL=$LUCEBOX_TINY_MODEL

if [ -f ci/docker.sh ]; then
  step "start dockerd"
  bash ci/docker.sh
fi
for image_script in ci/build-engine-image.sh ci/build-cpu-image.sh; do
  if [ -f "$image_script" ]; then
    step "build images: $image_script"
    bash "$image_script"
  fi
done

step "cargo fmt --check"
cargo fmt --all -- --check
step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets -- -D warnings
if [ -f ci/lint.sh ]; then
  step "lint Dockerfiles, manifests and units"
  bash ci/lint.sh
fi
step "cargo test (release profile: shares the dependency build with the CPU image)"
cargo test --release --workspace --no-fail-fast -- --test-threads="${LUCEBOX_TEST_THREADS:-2}"
step "cargo clippy and hardware tests with the rocm feature (ROCm SMI, no AMD GPU needed)"
cargo clippy -p lucebox --features rocm --all-targets -- -D warnings
cargo test --release -p lucebox --features rocm --lib hardware:: -- --test-threads="${LUCEBOX_TEST_THREADS:-2}"
step "done"
