#!/usr/bin/env bash
# Issue 5, reproduced in one command ON the GPU test host (an H200 with no SSH server and no
# package index), from the repository root, with .gpu-host (OpenSSH debs + start-sshd.sh) and
# .whl (fleetctl's dependencies as cp312 wheels) carried along:
#
#   bash bench/gpu_host_deploy.sh            # results under $OUT (default /tmp/out)
#
# It makes the host a fleet node (real sshd on 127.0.0.1:2222), installs fleetctl in a venv the
# way README says (pip install -e ., here from the wheel folder: the host reaches no index), then
# over SSH: facts, deploy (build for the host's SM only, install, verify on the GPU), verify, a
# second deploy (nothing changed), and finally the kernel benchmark.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
log="$OUT/session.txt"
exec > >(tee -a "$log") 2>&1
echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader)"

bash .gpu-host/start-sshd.sh .gpu-host/debs 2222 | tee "$OUT/sshd.txt"
state=/tmp/gpuhost-sshd
sed -n 's/^known_hosts line: //p' "$OUT/sshd.txt" > "$state/known_hosts"

echo "== install fleetctl (controller venv, offline wheels)"
python3 -m venv /tmp/ctl 2>/dev/null || python3 -m venv --without-pip /tmp/ctl
if [ -x /tmp/ctl/bin/pip ]; then /tmp/ctl/bin/pip install -q --no-index --find-links .whl -e . || exit 1
else python3 -m pip --python /tmp/ctl/bin/python3 install -q --no-index --find-links .whl -e . || exit 1; fi

cat > /tmp/gpu-inventory.yaml <<INV
all:
  children:
    gpu-nodes:
      hosts:
        h200:
          ansible_host: 127.0.0.1
          ansible_port: 2222
          ansible_user: root
          ansible_ssh_private_key_file: $state/client
          known_hosts: $state/known_hosts
          venv: /opt/torch/.venv
INV
export FLEETCTL_HOME=/tmp/fh
fl() { /tmp/ctl/bin/fleetctl -i /tmp/gpu-inventory.yaml "$@"; }

echo "== fleetctl facts --hosts gpu-nodes --json"
fl facts --hosts gpu-nodes --json > "$OUT/facts.json"; echo "rc=$?"
echo "== fleetctl deploy --hosts gpu-nodes"
/opt/torch/.venv/bin/python3 -c 'import torch; print("torch before:", torch.__version__, torch.version.cuda)'
start=$(date +%s); fl deploy --hosts gpu-nodes; echo "rc=$? wall_s=$(( $(date +%s) - start ))"
/opt/torch/.venv/bin/python3 -c 'import torch; print("torch after:", torch.__version__, torch.version.cuda)'
echo "== fleetctl verify --hosts gpu-nodes"
fl verify --hosts gpu-nodes; echo "rc=$?"
echo "== second deploy, nothing changed"
start=$(date +%s); fl deploy --hosts gpu-nodes; echo "rc=$? wall_s=$(( $(date +%s) - start ))"
fl runs
tar czf "$OUT/runs.tgz" -C /tmp/fh runs

# Issue 19: the no-change deploy against `fleetctl run` on this host, and verify's own cost
# (NOCHANGE_REPEATS rounds, interleaved; medians). SKIP_KERNEL_BENCH=1 stops after this.
reps=${NOCHANGE_REPEATS:-5}
echo "== no-change deploy vs run, $reps rounds"
timed() { local t0=$EPOCHREALTIME; "$@" >/dev/null 2>&1; local rc=$?; echo "$t0 $EPOCHREALTIME rc=$rc"; }
for i in $(seq "$reps"); do
  echo "run $(timed fl run --hosts gpu-nodes -- true)"
  echo "deploy_noverify $(timed fl deploy --hosts gpu-nodes --skip-tags verify)"
  echo "deploy $(timed fl deploy --hosts gpu-nodes)"
  echo "verify $(timed fl verify --hosts gpu-nodes)"
done | tee "$OUT/nochange.txt"
python3 - "$OUT/nochange.txt" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, t0, t1, rc = line.split()
    rows.setdefault(name, []).append(float(t1) - float(t0))
run = statistics.median(rows["run"])
for name, v in rows.items():
    print(f"{name:16s} median {statistics.median(v):6.2f} s  min {min(v):6.2f}  max {max(v):6.2f}  "
          f"vs run {statistics.median(v) / run:5.2f}x")
PY
[ "${SKIP_KERNEL_BENCH:-0}" = 1 ] && exit 0

echo "== benchmark"
cd /tmp && PYTHONUNBUFFERED=1 /opt/torch/.venv/bin/python3 "$OLDPWD/bench/bench_fp4.py" --out "$OUT/bench.json" \
  | tee "$OUT/bench.txt"
