#!/usr/bin/env bash
# Issue 28 diagnostics on the GPU host (one device call): build kernel_src for this GPU, selfcheck,
# bench/issue28_probe.py, Nsight Compute of the wgmma kernel at M = 128 and 32 (8192^2), then the
# issue's table. Usage (repo root): bash bench/issue28_diag.sh OUTDIR
# (env: TABLE=0, NCU=0, NCU_CFGS='N K M [g u l];...', PROBE=0, PROBE_ARGS, FP4_WG_SWEEP=ON for every tuning,
#  BENCH_ARGS: more arguments of bench/issue28.py (--m, --shapes, --fp16-m),
#  FLOW=1: bench/issue28_flow.py, the stage-round-trip A/B, flows 0 (baseline) 1 2 3 interleaved in one
#  process, after its bit-identity selfcheck; FLOW_ARGS. The next device call of issue 28:
#  NCU=0 TABLE=0 PROBE=0 FLOW=1 bash bench/issue28_diag.sh OUT;
#  HOST=1: bench/issue28_host.py, the host time of an eager call's parts on the dequantize + cuBLAS path;
#  WIDE=1: bench/issue28_wide.py, two warpgroups on 256-token tiles against today's paths, M = 256 .. 4096; WIDE_ARGS;
#  PDL=1: bench/issue28_pdl.py, launch overlap (programmatic dependent launch, L2 prefetch) A/B; PDL_ARGS;
#  PKSWEEP=1: bench/issue28_pk_sweep.py, every prepacked-kernel configuration at M = 1 .. 4, plain and pdl;
#  NCU_KERNEL=pk: Nsight Compute of the prepacked kernel (forced) instead of the wgmma one;
#  PKFORCED=1: bench/issue28_pk_forced.py, the plan's prepacked configuration against forced ones at 16 / 32 tokens;
#  BUILD_AB=DIR: bench/issue28_build_ab.py, DIR (an older kernel_src) against this one, alternating runs; AB_ARGS)
set -uo pipefail
out=${1:?OUTDIR}; mkdir -p "$out"
py=${PYTHON:-python3}
work=$(mktemp -d)
export TORCH_CUDA_ARCH_LIST=9.0a CUDA_HOME=/usr/local/cuda PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
t0=$(date +%s)
$py -m pip wheel -v --no-build-isolation --no-deps -w "$work/whl" ./kernel_src > "$work/build.log" 2>&1 || { cp "$work/build.log" "$out/"; tail -40 "$out/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
$py -m pip install -q --no-deps --target "$work/site" "$work"/whl/*.whl
export PYTHONPATH="$work/site"
timeout 200 $py -c "
import json, fp4_kernels as fk
r = fk.selfcheck('cuda', seed=4321); bad = [c for c in r['checks'] if not c['ok']]
print('selfcheck', r['ok'], len(r['checks']), bad[:5])" 2>&1 | tee "$out/selfcheck.txt"
if [ -n "${BUILD_AB:-}" ]; then  # BUILD_AB=DIR: DIR's kernel_src (the build before) against this one
  $py -m pip wheel -v --no-build-isolation --no-deps -w "$work/whl_base" "$BUILD_AB" > "$work/build_base.log" 2>&1 \
    || { cp "$work/build_base.log" "$out/"; tail -40 "$out/build_base.log"; exit 1; }
  $py -m pip install -q --no-deps --target "$work/site_base" "$work"/whl_base/*.whl
  for r in 1 2; do
    PYTHONPATH="$work/site_base" timeout 240 $py bench/issue28_build_ab.py run base "$out/ab_base_$r.json" ${AB_ARGS:-} > /dev/null
    timeout 240 $py bench/issue28_build_ab.py run new "$out/ab_new_$r.json" ${AB_ARGS:-} > /dev/null
  done
  $py bench/issue28_build_ab.py compare "$out"/ab_base_*.json "$out"/ab_new_*.json 2>&1 | tee "$out/ab.txt"
fi
[ "${FLOW:-0}" = 1 ] && timeout ${FLOW_TIMEOUT:-240} $py bench/issue28_flow.py ${FLOW_ARGS:-} 2>&1 | tee "$out/flow.txt"
[ "${HOST:-0}" = 1 ] && timeout 150 $py bench/issue28_host.py 2>&1 | tee "$out/host.txt"
[ "${WIDE:-0}" = 1 ] && timeout ${WIDE_TIMEOUT:-300} $py bench/issue28_wide.py ${WIDE_ARGS:-} 2>&1 | tee "$out/wide.txt"
[ "${PDL:-0}" = 1 ] && timeout ${PDL_TIMEOUT:-300} $py bench/issue28_pdl.py ${PDL_ARGS:-} 2>&1 | tee "$out/pdl.txt"
[ "${PKFORCED:-0}" = 1 ] && timeout 200 $py bench/issue28_pk_forced.py 2>&1 | tee "$out/pk_forced.txt"
[ "${PKSWEEP:-0}" = 1 ] && timeout 300 $py bench/issue28_pk_sweep.py ${PKSWEEP_ARGS:-} 2>&1 | tee "$out/pk_sweep.txt"
[ "${PROBE:-1}" = 1 ] && timeout ${PROBE_TIMEOUT:-150} $py bench/issue28_probe.py ${PROBE_ARGS:-} 2>&1 | tee "$out/probe.txt"
IFS=";" read -ra cfgs <<< "${NCU_CFGS:-8192 8192 128;8192 8192 32}"  # N K M [groups units lanes]
[ "${NCU:-1}" = 1 ] && for cfg in "${cfgs[@]}"; do
  tag=$(echo $cfg | tr ' ' _)
  FP4_NCU_KERNEL=${NCU_KERNEL:-wg} timeout 120 ncu --clock-control none -k regex:${NCU_KERNEL:-wg}_kernel -s 2 -c 1 \
      --set full --import-source no -o "$work/rep_$tag" $py bench/issue28_ncu.py run $cfg > "$work/ncu_$tag.log" 2>&1 \
      || tail -5 "$work/ncu_$tag.log"
  ncu -i "$work/rep_$tag.ncu-rep" --page details > "$out/ncu_$tag.txt" 2>&1
  ncu -i "$work/rep_$tag.ncu-rep" --page source --print-source sass --csv > "$work/src_$tag.csv" 2>&1
  $py bench/issue28_ncu.py summary "$work/src_$tag.csv" > "$out/stall_$tag.txt" 2>&1
  [ "${KEEP_SRC:-0}" = 1 ] && head -c 3000000 "$work/src_$tag.csv" > "$out/src_$tag.csv"
  grep -E "Duration|Throughput|Issued Ipc|Eligible|No Eligible|Tensor|Occupancy|Stall|stall|Hit Rate|Warp Cycles" "$out/ncu_$tag.txt" | head -45
  head -40 "$out/stall_$tag.txt"
done
if [ "${TABLE:-1}" = 1 ]; then
  timeout ${BENCH_TIMEOUT:-300} $py bench/issue28.py --out "$out" ${BENCH_ARGS:-} > "$out/issue28.txt" 2>&1
  tail -80 "$out/issue28.txt" | cut -c1-150
fi
rm -rf "$work"
