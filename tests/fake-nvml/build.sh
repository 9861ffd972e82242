#!/usr/bin/env bash
# Builds the fake libnvidia-ml.so.1 into DIR (default: target/fake-nvml) and prints its path.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out_dir=${1:-$here/../../target/fake-nvml}
mkdir -p "$out_dir"
cc -shared -fPIC -O1 -Wall -Werror -o "$out_dir/libnvidia-ml.so.1" "$here/fake_nvml.c"
echo "$out_dir/libnvidia-ml.so.1"
