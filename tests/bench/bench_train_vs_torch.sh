#!/usr/bin/env bash
# Training speed of capplan-train on the CPU backend vs PyTorch on the same GPT shape, threads
# and precision, plus the GPT-2 124M shape and the fraction of this machine's measured fp32 GEMM
# peak (capplan-train's GEMM probe, reported in its metrics). Prints figures; asserts nothing.
#
#   tests/bench/bench_train_vs_torch.sh [BUILD_DIR] [--no-torch] [--rounds N] [--steps N]
#
# Each round runs both sides for N steps (default 20) and measures the steps after the first two
# (this machine's load moves throughput by +-10 % from minute to minute, so one round proves
# little; the default is 10 rounds, about 5 minutes).
# The last lines give the median speed-up over the rounds with its range, and a bound on it:
# the speed-up capplan would reach if its step were only its GEMMs (the metrics' gemm_s), the
# same OpenBLAS sgemm calls PyTorch makes.
#
# Shape: 4 layers, d_model 256, 4 heads, seq 128, vocab 4096, batch 8, 2 threads, fp32.
# PyTorch comes from Debian's python3-torch, installed here with apt-get when missing (never by
# the test suite); the runs alternate capplan / PyTorch so background load hits both alike.
set -euo pipefail

BUILD=build
TORCH=1
ROUNDS=10
STEPS=20
while [[ $# -gt 0 ]]; do
  case "$1" in
    --no-torch) TORCH=0 ;;
    --rounds) ROUNDS="$2"; shift ;;
    --steps) STEPS="$2"; shift ;;
    *) BUILD="$1" ;;
  esac
  shift
done
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TRAIN="$BUILD/bin/capplan-train"
[[ -x "$TRAIN" ]] || { echo "error: $TRAIN not found (build the capplan-train target)" >&2; exit 2; }
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

cat > "$WORK/bench.yaml" <<YAML
name: bench-4l-256
layers: 4
hidden: 256
heads: 4
vocab: 4096
seq_len: 128
YAML

# Debian's python3-torch lives in the system interpreter (/usr/bin/python3), which may not be the
# first python3 on PATH (pyenv, venvs).
TORCH_PY=""
find_torch() {
  for py in python3 /usr/bin/python3; do
    if "$py" -c "import torch" 2>/dev/null; then TORCH_PY="$py"; return 0; fi
  done
  return 1
}
if [[ $TORCH == 1 ]] && ! find_torch; then
  echo "installing python3-torch for the reference (apt-get)..."
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get install -y -q --no-install-recommends python3-torch >/dev/null || true
  find_torch || { echo "python3-torch unavailable; capplan figures only"; TORCH=0; }
fi

# Mean of tokens/s and MFU over the steps after the first two, from a metrics file.
summarise() {
  python3 - "$1" <<'PY'
import json, sys
steps, peak, src = [], 0.0, ""
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("type") == "start":
        peak, src = r.get("peak_flops_per_s", 0) or 0, r.get("peak_flops_source", "")
    elif r.get("type") == "step":
        steps.append(r)
steady = steps[2:] or steps
# Tokens over time, as the PyTorch side measures it (not a mean of per-step rates).
secs = sum(s["step_time_s"] for s in steady)
tps = sum(s["tokens_per_s"] * s["step_time_s"] for s in steady) / secs
flops = sum(s["model_flops_per_s"] * s["step_time_s"] for s in steady) / secs
gemm = sum(s.get("gemm_s", 0) for s in steady) / secs
print(json.dumps({"tokens_per_s": tps, "model_flops_per_s": flops, "peak_flops_per_s": peak,
                  "peak_fraction": flops / peak if peak else None, "peak_source": src,
                  "gemm_share": gemm}))
PY
}

capplan_run() {  # model args..., prints the summary JSON
  "$TRAIN" --threads 2 --lr 3e-4 --metrics "$WORK/m.jsonl" "$@" >/dev/null
  summarise "$WORK/m.jsonl"
}

echo "== shape: 4 layers, d 256, 4 heads, seq 128, vocab 4096, batch 8, 2 threads, fp32"
RATIOS=()
BOUNDS=()
for r in $(seq 1 "$ROUNDS"); do
  c=$(capplan_run --model "$WORK/bench.yaml" --mbs 8 --gbs 8 --steps "$STEPS")
  echo "round $r capplan-train: $c"
  if [[ $TORCH == 1 ]]; then
    t=$("$TORCH_PY" "$HERE/bench_train_torch.py" --threads 2 --steps "$STEPS")
    echo "round $r pytorch:       $t"
    ratio=$(python3 -c "import json,sys; print('%.3f' % (json.loads(sys.argv[1])['tokens_per_s'] / json.loads(sys.argv[2])['tokens_per_s']))" "$c" "$t")
    RATIOS+=("$ratio")
    # If capplan's step were its GEMMs alone (OpenBLAS, as PyTorch's), the speed-up would be
    # ratio / gemm_share: the most capplan could reach in this round without faster GEMMs.
    bound=$(python3 -c "import json,sys; c=json.loads(sys.argv[1]); print('%.3f' % (float(sys.argv[2]) / c['gemm_share']) if c['gemm_share'] > 0 else 'n/a')" "$c" "$ratio")
    BOUNDS+=("$bound")
    echo "round $r speed-up capplan / pytorch: ${ratio}x (GEMMs alone would give ${bound}x)"
  fi
done
if [[ ${#RATIOS[@]} -gt 0 ]]; then
  python3 -c "import statistics,sys; r=sorted(float(x) for x in sys.argv[1:]); print('speed-up capplan / pytorch over %d rounds: median %.2fx (range %.2f-%.2fx)' % (len(r), statistics.median(r), r[0], r[-1]))" "${RATIOS[@]}"
  python3 -c "import statistics,sys; r=sorted(float(x) for x in sys.argv[1:] if x != 'n/a'); print('bound with capplan reduced to its GEMMs: median %.2fx (range %.2f-%.2fx)' % (statistics.median(r), r[0], r[-1])) if r else None" "${BOUNDS[@]}"
fi

echo "== shape: GPT-2 124M (12 layers, d 768, 12 heads, vocab 50257), seq 256, batch 4, 2 threads"
c=$(capplan_run --model gpt2-124m --seq 256 --mbs 4 --gbs 4 --steps 5)
echo "capplan-train: $c"
