# issue 27: where verify's ~4 s go on the GPU host (wall s, 3 rounds each)
set -u
py=/opt/torch/.venv/bin/python3
work=$(mktemp -d)
export TORCH_CUDA_ARCH_LIST=9.0a CUDA_HOME=/usr/local/cuda PATH=/usr/local/cuda/bin:$PATH
$py -m pip wheel -q --no-build-isolation --no-deps -w "$work/whl" ./kernel_src > "$work/b.log" 2>&1 || { tail -20 "$work/b.log"; exit 1; }
$py -m pip install -q --no-deps --target "$work/site" "$work"/whl/*.whl
S="import sys; sys.path.insert(0, '$work/site')"
t() { local name=$1; shift; for i in 1 2 3; do s=$EPOCHREALTIME; "$@" >/dev/null 2>&1; echo "$name $(python3 -c "print(round($EPOCHREALTIME-$s,3))")"; done; }
t interp_start $py -I -c pass
t import_torch $py -I -c "import torch"
t torch_cuda_ctx $py -I -c "import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()"
t import_fp4_first $py -I -c "$S; import fp4_kernels"
t fp4_then_torch_ctx $py -I -c "$S; import fp4_kernels, torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()"
t selfcheck_cuda $py -I -c "$S; import fp4_kernels as fk, torch; r = fk.selfcheck(device='cuda:0'); assert r['ok']"
$py -I -c "
$S
import time
t0 = time.perf_counter(); import fp4_kernels as fk, torch; t1 = time.perf_counter()
torch.zeros(1, device='cuda'); torch.cuda.synchronize(); t2 = time.perf_counter()
r = fk.selfcheck(device='cuda:0'); t3 = time.perf_counter()
r = fk.selfcheck(device='cuda:0'); t4 = time.perf_counter()
print('in-process: imports %.3f  cuda context %.3f  selfcheck first %.3f  again %.3f  checks %d' % (t1-t0, t2-t1, t3-t2, t4-t3, len(r['checks'])))
names = sorted(((c.get('seconds', 0), c.get('name')) for c in r['checks']), reverse=True)[:8]
print('slowest checks (if timed):', names)
"
rm -rf "$work"
