#!/usr/bin/env bash
# Build kernel_src for the local GPU, run the CUDA selfcheck and the benchmark.
# Usage (from the repo root, on a GPU host): bash bench/run_on_gpu.sh OUTDIR [bench args...]
set -euo pipefail
out=${1:-/tmp/fp4_out}; shift || true
mkdir -p "$out"
py=${PYTHON:-python3}
arch=$($py -c "import torch; p=torch.cuda.get_device_properties(0); print('%d.%da' % (p.major, p.minor))")
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-$arch}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PATH=${CUDA_HOME:-/usr/local/cuda}/bin:$PATH
t0=$(date +%s)
$py -m pip wheel -v --no-build-isolation --no-deps -w "$out/whl" ./kernel_src > "$out/build.log" 2>&1 || { tail -50 "$out/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"; grep "fp4_kernels:" "$out/build.log" || true
rm -rf "$out/site" && $py -m pip install -q --no-deps --target "$out/site" "$out"/whl/*.whl
export PYTHONPATH="$out/site${PYTHONPATH:+:$PYTHONPATH}"
$py - <<'PY' | tee "$out/selfcheck.json"
import json, fp4_kernels as fk
r = fk.selfcheck("cuda", seed=1234)
bad = [c for c in r["checks"] if not c["ok"]]
print(json.dumps({"ok": r["ok"], "n": len(r["checks"]), "failed": bad, "build": r["build"]}, indent=1))
PY
$py bench/bench_fp4.py --out "$out/bench.json" "$@"
