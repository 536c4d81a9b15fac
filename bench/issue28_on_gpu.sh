#!/usr/bin/env bash
# Issue 28's benchmark on a GPU host: build kernel_src for the local GPU, run the CUDA selfcheck,
# then bench/issue28.py (the table for the five shapes, M = 1 .. 4096, W4A16 and W4A4, graph and
# eager, the copy bandwidth of the same run).
# Usage (repo root, on the GPU host): bash bench/issue28_on_gpu.sh OUTDIR [issue28.py args...]
set -euo pipefail
out=${1:?OUTDIR}; shift
mkdir -p "$out"
py=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
arch=$($py -c "import torch; p=torch.cuda.get_device_properties(0); print('%d.%d%s' % (p.major, p.minor, 'a' if p.major >= 9 else ''))")
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-$arch}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PATH=${CUDA_HOME:-/usr/local/cuda}/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv > "$out/gpu.txt" 2>&1 || true
t0=$(date +%s)
$py -m pip wheel -v --no-build-isolation --no-deps -w "$work/whl" ./kernel_src > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s ($TORCH_CUDA_ARCH_LIST)"
$py -m pip install -q --no-deps --target "$work/site" "$work"/whl/*.whl
export PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}"
timeout 300 $py - <<'PY' | tee "$out/selfcheck.json"
import json, fp4_kernels as fk
r = fk.selfcheck("cuda", seed=1234)
bad = [c for c in r["checks"] if not c["ok"]]
print(json.dumps({"ok": r["ok"], "n": len(r["checks"]), "failed": bad[:10]}, indent=1))
PY
PYTHONUNBUFFERED=1 timeout ${BENCH_TIMEOUT:-400} $py bench/issue28.py --out "$out" "$@" 2>&1 | tee "$out/issue28.txt"
