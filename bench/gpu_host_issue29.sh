#!/usr/bin/env bash
# Issue 29 as far as the one-GPU H200 allows, ON the GPU test host from the repository root (with
# .gpu-host and .whl carried, as bench/gpu_host_deploy.sh needs): that script's deploy over a real
# sshd (facts, build for the host's SM, install, verify, a no-change deploy, and issue 27's
# no-change deploy / verify timings), then: the GPUs facts list (index, name, UUID, bus id), the
# per-GPU verify as JSON, and verify with CUDA_VISIBLE_DEVICES set in the login environment
# (root's ~/.bashrc, as users set it): hiding the GPU, and naming it.
#
#   OUT=/tmp/out bash bench/gpu_host_issue29.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
SKIP_KERNEL_BENCH=1 NOCHANGE_REPEATS=${NOCHANGE_REPEATS:-3} OUT=$OUT bash bench/gpu_host_deploy.sh
exec > >(tee -a "$OUT/issue29.txt") 2>&1
fl() { FLEETCTL_HOME=/tmp/fh /tmp/ctl/bin/fleetctl -i /tmp/gpu-inventory.yaml "$@"; }
echo "== the GPUs in facts"
python3 - "$OUT/facts.json" <<'PY'
import json, sys
facts = json.load(open(sys.argv[1]))
for host, f in facts.items():
    for g in f.get("gpus", []):
        print(host, {k: g.get(k) for k in ("index", "name", "compute_cap", "memory_mib", "uuid", "pci_bus_id")})
PY
echo "== verify --json (per GPU)"
fl verify --hosts gpu-nodes --json > "$OUT/verify.json"; echo "rc=$?"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps(d, indent=1)[:3000])" "$OUT/verify.json"
cp /root/.bashrc /root/.bashrc.issue29 2>/dev/null || touch /root/.bashrc.issue29
for v in "" "0" "GPU-00000000-0000-0000-0000-000000000000"; do
  echo "== verify with CUDA_VISIBLE_DEVICES='$v' in root's ~/.bashrc"
  { echo "export CUDA_VISIBLE_DEVICES='$v'"; cat /root/.bashrc.issue29; } > /root/.bashrc
  start=$EPOCHREALTIME; fl verify --hosts gpu-nodes --output lines; echo "rc=$? wall_s=$(python3 -c "print(round($EPOCHREALTIME-$start,2))")"
done
cp /root/.bashrc.issue29 /root/.bashrc
tar czf "$OUT/runs29.tgz" -C /tmp/fh runs
