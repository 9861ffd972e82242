#!/usr/bin/env bash
# The README's run command: from a fresh machine, sets everything up and runs the supervisor in
# the foreground with the embedded default (on a machine without a usable GPU: the CPU
# llama-server and the tiny test model). Extra arguments go to `lucebox run`.
#
# Ports: engine API 127.0.0.1:8080, status page 127.0.0.1:8090. State under ./target/serve/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/install-deps.sh
server=$(bash ci/build-engine.sh)

state=${LUCEBOX_STATE_DIR:-$PWD/target/serve/state}
engines=$PWD/target/serve/engines
models=${LUCEBOX_MODELS_DIR:-$state/models}
mkdir -p "$state" "$engines/cpu/bin" "$models"
ln -sf "$server" "$engines/cpu/bin/llama-server"
bash ci/make-tiny-model.sh "$models/tiny-llama.gguf" >/dev/null

echo "serve: building the supervisor (release)" >&2
cargo build --release -p lucebox >&2
# Where cargo put it: CARGO_TARGET_DIR moves the build out of ./target.
lucebox=${CARGO_TARGET_DIR:-$PWD/target}/release/lucebox
export LUCEBOX_STATE_DIR=$state LUCEBOX_ENGINES_DIR=$engines LUCEBOX_MODELS_DIR=$models
echo "serve: lucebox detect" >&2
"$lucebox" detect >&2
exec "$lucebox" run "$@"
