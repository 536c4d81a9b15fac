#!/usr/bin/env bash
# Build kernel_src for the local GPU, run the CUDA selfcheck and the benchmark.
# Usage (from the repo root, on a GPU host): bash bench/run_on_gpu.sh OUTDIR [bench args...]
# OUTDIR receives only small files (build.log, ptxas.txt, selfcheck.json, bench.txt,
# bench.json); the wheel and its install go to $FP4_WORK (default: a temp dir).
set -euo pipefail
out=${1:-/tmp/fp4_out}; shift || true
mkdir -p "$out"
work=${FP4_WORK:-$(mktemp -d)}
py=${PYTHON:-python3}
arch=$($py -c "import torch; p=torch.cuda.get_device_properties(0); print('%d.%da' % (p.major, p.minor))")
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-$arch}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PATH=${CUDA_HOME:-/usr/local/cuda}/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw \
  --format=csv > "$out/gpu.txt" 2>&1 || true
t0=$(date +%s)
$py -m pip wheel -v --no-build-isolation --no-deps -w "$work/whl" ./kernel_src > "$out/build.log" 2>&1 || { tail -50 "$out/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"; grep "fp4_kernels:" "$out/build.log" || true
rm -rf "$work/site" && $py -m pip install -q --no-deps --target "$work/site" "$work"/whl/*.whl
export PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}"
$py - <<'PY' | tee "$out/selfcheck.json"
import json, fp4_kernels as fk
r = fk.selfcheck("cuda", seed=1234)
bad = [c for c in r["checks"] if not c["ok"]]
print(json.dumps({"ok": r["ok"], "n": len(r["checks"]), "failed": bad, "build": r["build"]}, indent=1))
PY
set -o pipefail
PYTHONUNBUFFERED=1 $py bench/bench_fp4.py --out "$out/bench.json" "$@" 2>&1 | tee "$out/bench.txt"
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv >> "$out/gpu.txt" 2>&1 || true
