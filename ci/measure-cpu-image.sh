#!/usr/bin/env bash
# Figures of the CPU image: its size, and cold start to first token (docker run -> first chat
# completion answered), best and worst of N runs. 127.0.0.1 and --network host only.
#   bash ci/measure-cpu-image.sh [--engine-only] [RUNS]
# Default: `docker run IMAGE` (the supervisor plans and starts the engine; API on 8080), with the
# tiny model mounted as the model volume. --engine-only starts the image's llama-server directly
# (no supervisor) on port 18080, to separate the engine's share.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
image=${LUCEBOX_CPU_IMAGE:-lucebox/lucebox-cpu:test}
engine_only=false
if [ "${1:-}" = "--engine-only" ]; then engine_only=true; shift; fi
runs=${1:-3}
model=${LUCEBOX_TINY_MODEL:-/var/cache/lucebox-ci/models/lucebox-tiny.gguf}
[ -f "$model" ] || { echo "measure: $model missing (bash ci/make-tiny-model.sh)" >&2; exit 1; }
# The model volume holds the file the tiny-cpu-test profile names.
models_dir=$(mktemp -d)
cp "$model" "$models_dir/tiny-llama.gguf"

size=$(docker image inspect -f '{{.Size}}' "$image")
echo "image $image: $((size / 1024 / 1024)) MiB ($size bytes)"

name=lucebox-measure-$$
trap 'docker rm -f "$name" >/dev/null 2>&1 || true; rm -rf "$models_dir"' EXIT
times=()
for _ in $(seq 1 "$runs"); do
  docker rm -f "$name" >/dev/null 2>&1 || true
  start=$(date +%s%N)
  if $engine_only; then
    port=18080
    docker run -d --network host --name "$name" -v "$models_dir:/m:ro" \
      --entrypoint /usr/lib/lucebox/engines/cpu/bin/llama-server "$image" \
      -m /m/tiny-llama.gguf --host 127.0.0.1 --port $port >/dev/null
  else
    port=8080
    docker run -d --network host --name "$name" -v "$models_dir:/var/lib/lucebox/models:ro" "$image" >/dev/null
  fi
  deadline=$(( $(date +%s) + 300 ))
  until curl -sf -o /dev/null -X POST "http://127.0.0.1:$port/v1/chat/completions" \
      -H 'Content-Type: application/json' \
      -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":1}' 2>/dev/null; do
    [ "$(date +%s)" -lt "$deadline" ] || { echo "measure: no reply within 300 s" >&2; docker logs "$name" >&2; exit 1; }
    sleep 0.05
  done
  times+=( $(( ($(date +%s%N) - start) / 1000000 )) )
done
sorted=$(printf '%s\n' "${times[@]}" | sort -n)
echo "cold start to first token ($($engine_only && echo engine only || echo supervisor + engine), $runs runs): best $(echo "$sorted" | head -1) ms, worst $(echo "$sorted" | tail -1) ms"
