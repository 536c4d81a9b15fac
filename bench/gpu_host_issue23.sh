#!/usr/bin/env bash
# Issue 23 on the GPU test host (one H200), in one command from the repository root, with .gpu-host
# and .whl carried (see bench/gpu_host_deploy.sh):
#
#   bash bench/gpu_host_issue23.sh           # results under $OUT (default /tmp/out)
#
# 1. bench/gpu_host_deploy.sh without the kernel benchmark: facts (gpu_stack, every GPU with UUID
#    and bus id), a deploy over a real sshd, verify on every GPU, a no-change deploy.
# 2. verify_package.py run straight on the host with every GPU hidden from torch
#    (CUDA_VISIBLE_DEVICES=""): it must say which GPUs torch does not see, not pass silently.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
SKIP_KERNEL_BENCH=1 NOCHANGE_REPEATS=${NOCHANGE_REPEATS:-2} bash bench/gpu_host_deploy.sh
exec >> "$OUT/session.txt" 2>&1
echo "== facts: gpu_stack and the GPUs"
python3 - "$OUT/facts.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
for host, f in doc.items():
    print(host, "gpu_stack:", json.dumps(f.get("gpu_stack")))
    for g in f.get("gpus", []):
        print("  gpu", json.dumps(g))
    print("  build:", json.dumps(f.get("build")))
PY
gpus=$(nvidia-smi --query-gpu=index,name,uuid,pci.bus_id --format=csv,noheader | python3 -c '
import sys, json
print(json.dumps([dict(zip(("index", "name", "uuid", "pci_bus_id"), [x.strip() for x in l.split(",")]))
                  for l in sys.stdin if l.strip()]))')
echo "== verify_package.py, every GPU visible"
/opt/torch/.venv/bin/python3 -I playbooks/scripts/verify_package.py --package fp4_kernels --venv /opt/torch/.venv \
    --device cuda --smoke --gpus "$gpus"; echo "rc=$?"
echo "== verify_package.py, CUDA_VISIBLE_DEVICES='' (torch sees none of them)"
CUDA_VISIBLE_DEVICES= /opt/torch/.venv/bin/python3 -I playbooks/scripts/verify_package.py --package fp4_kernels \
    --venv /opt/torch/.venv --device cuda --smoke --gpus "$gpus"; echo "rc=$?"
