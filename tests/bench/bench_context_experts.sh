#!/usr/bin/env bash
# Throughput of capplan-train's context and expert parallelism on this machine: one sequence
# length trained on 1 rank and with the sequence split over cp 2 ranks (ring attention), and an
# MoE model (8 experts, top-2) on 1 rank, dp 2 and dp 2 x ep 2 (all-to-all-v of the chosen rows).
# Tokens/s is the mean over the last steps, loss the last step's; on a machine with fewer cores
# than ranks the ranks share them, so these are costs of the code paths, not speed-ups.
# Prints figures; asserts nothing. Usage: tests/bench/bench_context_experts.sh [BUILD_DIR] [STEPS]
set -euo pipefail
BUILD="${1:-${CAPPLAN_BUILD_DIR:-build}}"
STEPS="${2:-8}"
TRAIN="$BUILD/bin/capplan-train"
[[ -x "$TRAIN" ]] || { echo "error: $TRAIN not found (build the capplan-train target)" >&2; exit 2; }
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
cat > "$WORK/dense.yaml" <<YAML
name: bench-dense-4l-128
layers: 4
hidden: 128
heads: 4
kv_heads: 2
vocab: 512
seq_len: 512
ffn: swiglu
norm: rmsnorm
position: rope
YAML
sed -e 's/bench-dense/bench-moe/' -e 's/seq_len: 512/seq_len: 128/' "$WORK/dense.yaml" > "$WORK/moe.yaml"
cat >> "$WORK/moe.yaml" <<YAML
moe:
  experts: 8
  top_k: 2
  expert_ffn_hidden: 128
  capacity_factor: 1.25
YAML
printf "%-28s %-6s %-12s %-10s %s\n" layout ranks tokens/s step_s last_loss
run() {  # run NAME RANKS MODEL FLAGS...
  local name="$1" np="$2" model="$3"
  shift 3
  local threads=$(( $(nproc) / np )); (( threads >= 1 )) || threads=1
  local out
  out=$(mpirun -np "$np" --bind-to none "$TRAIN" --threads "$threads" --model "$model" --mbs 1 \
          --steps "$STEPS" --seed 5 "$@" 2>&1 | grep '^step' | tail -$(( STEPS / 2 )))
  echo "$out" | awk -v n="$name" -v r="$np" '
    {for (i = 1; i <= NF; i++) { if ($i == "tokens/s") t += $(i+1); if ($i == "step_s") s += $(i+1); if ($i == "loss") l = $(i+1) } k++}
    END {printf "%-28s %-6s %-12.0f %-10.4f %s\n", n, r, t / k, s / k, l}'
}
run "dense seq 512, 1 rank" 1 "$WORK/dense.yaml" --gbs 4
run "dense seq 512, cp 2" 2 "$WORK/dense.yaml" --gbs 4 --cp 2
run "moe seq 128, 1 rank" 1 "$WORK/moe.yaml" --gbs 8
run "moe seq 128, dp 2" 2 "$WORK/moe.yaml" --gbs 8 --dp 2
run "moe seq 128, dp 2 x ep 2" 2 "$WORK/moe.yaml" --gbs 8 --dp 2 --ep 2
echo "(gbs sequences per step; the cp rows process every sequence's tokens split over 2 ranks)"
