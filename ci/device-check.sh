#!/usr/bin/env bash
# Detection on a real NVIDIA GPU: what the driver says (nvidia-smi, /proc, sysfs) beside what
# `lucebox detect` and `lucebox plan` make of it through the real NVML and, with NVML hidden,
# the real CUDA driver; then what the fan loop reads through NVML (`thermal sensors`: the cost of
# a read at idle, the readings while the GPU works), and a capture of the host tree
# (tests/fixtures/hosts/capture_host.py) for the detection tests.
#
#   ci/device-check.sh LUCEBOX_BINARY OUT_DIR
#
# Read-only towards the GPU: no clock, power or fan setting is written. The fan loop is run only
# where NVML reports no fan (it then has nothing to drive and must say so).
set -uo pipefail
bin=$(realpath "${1:?lucebox binary}")
out=${2:?output directory}
mkdir -p "$out"
exec > >(tee "$out/device-check.txt") 2>&1
step() { printf '\n== %s\n' "$*"; }
timed() { local t0=$EPOCHREALTIME; "$@"; local rc=$?; echo "(rc=$rc, $(awk "BEGIN { printf \"%.3f\", $EPOCHREALTIME - $t0 }") s)"; return $rc; }

step machine
date -u; uname -r; nproc; "$bin" version 2>/dev/null | head -3
step "the driver's view"
nvidia-smi --query-gpu=name,pci.bus_id,memory.total,driver_version,compute_cap,temperature.gpu,power.draw,fan.speed,uuid --format=csv
ls -l /dev/nvidia* 2>&1 | head
cat /proc/driver/nvidia/version 2>&1 | head -2
cat /proc/driver/nvidia/gpus/*/information 2>&1 | head -20
for d in /sys/bus/pci/devices/*; do
  [[ $(cat "$d/class") == 0x03* ]] || continue
  echo "$(basename "$d") class=$(cat "$d/class") id=$(cat "$d/vendor"):$(cat "$d/device") driver=$(basename "$(readlink "$d/driver")")"
done
ldconfig -p | grep -E 'libnvidia-ml.so.1|libcuda.so.1'

step "lucebox detect: NVML"
timed "$bin" detect
"$bin" detect --json >"$out/detect-nvml.json"
step "lucebox detect: NVML hidden, the CUDA driver answers"
timed "$bin" detect --nvml-lib /nonexistent/libnvidia-ml.so.1
"$bin" detect --json --nvml-lib /nonexistent/libnvidia-ml.so.1 >"$out/detect-cuda.json"
step "lucebox plan (no smoke start: no engine image here)"
timed "$bin" plan --no-smoke -v
"$bin" plan --no-smoke --json >"$out/plan.json"

address=$(python3 -c 'import json,sys; print(next(d["id"] for d in json.load(open(sys.argv[1]))["devices"] if d["vendor"]=="nvidia"))' "$out/detect-nvml.json")
step "what the fan loop reads through NVML: idle, 200 reads 10 ms apart (the cost of a read)"
"$bin" thermal sensors --vendor nvidia --device-id "$address" --samples 200 --period-ms 10 | tail -3
step "what the fan loop reads through NVML while the GPU works (15 s of bf16 matrix products)"
python3 - <<'EOF' &
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + 15
while time.time() < end:
    for _ in range(20):
        b = a @ a
    torch.cuda.synchronize()
EOF
load=$!
"$bin" thermal sensors --vendor nvidia --device-id "$address" --samples 10 --period-ms 2000
wait $load

step "fan loop through NVML"
fans=$(nvidia-smi --query-gpu=fan.speed --format=csv,noheader | head -1)
if [[ $fans == *N/A* ]]; then
  timed "$bin" thermal control --vendor nvidia --device-id "$address" --seconds 3 --state-dir "$(mktemp -d)"
else
  echo "skipped: this GPU has fans ($fans) and the check must not change its settings"
fi

step "capture of this host for tests/fixtures/hosts"
python3 tests/fixtures/hosts/capture_host.py /tmp/capture
tar czf "$out/capture.tar.gz" -C /tmp/capture .
step "the captured tree, detected with the fake NVML fed the real NVML's answers"
lib=$(tests/fake-nvml/build.sh /tmp/fake-nvml)
FAKE_NVML_CONFIG=/tmp/capture/nvml.json "$bin" detect --json --root /tmp/capture --nvml-lib "$lib" >"$out/detect-captured.json"
python3 - "$out/detect-nvml.json" "$out/detect-captured.json" <<'EOF'
import json, sys
live, captured = (json.load(open(p)) for p in sys.argv[1:])
keys = ["id", "model", "arch", "pci_id", "memory", "driver", "sources", "accessible", "uid"]
gpus = lambda d: {g["id"]: {k: g.get(k) for k in keys} for g in d["devices"] if g["vendor"] != "cpu"}
print("live and captured detection agree on", keys) if gpus(live) == gpus(captured) else print("DIFFER", gpus(live), gpus(captured))
EOF
