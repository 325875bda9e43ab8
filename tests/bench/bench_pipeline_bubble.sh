#!/usr/bin/env bash
# Measured pipeline bubble of capplan-train vs the schedule's ideal (p - 1) / (m + p - 1)
# (Narayanan et al. 2021, Sec 2.2; GPipe and 1F1B alike, interleaved divides it by vp).
# The measured figure is the mean over ranks of the share of the micro-batch phase spent waiting
# for a neighbour; it also contains stage imbalance (the last stage holds the LM head).
# Prints figures; asserts nothing. Usage: tests/bench/bench_pipeline_bubble.sh [BUILD_DIR]
set -euo pipefail
BUILD="${1:-build}"
TRAIN="$BUILD/bin/capplan-train"
[[ -x "$TRAIN" ]] || { echo "error: $TRAIN not found (build the capplan-train target)" >&2; exit 2; }
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
cat > "$WORK/m.yaml" <<YAML
name: bubble-8l-128
layers: 8
hidden: 128
heads: 4
vocab: 512
seq_len: 64
YAML
printf "%-4s %-12s %-4s %-4s %-10s %-10s %s\n" pp schedule vp m measured ideal step_s
for pp in 2 4; do
  for sched in gpipe 1f1b interleaved; do
    for m in 4 8; do
      vp=1; [[ $sched == interleaved ]] && vp=2
      out=$(mpirun -np "$pp" "$TRAIN" --threads 1 --model "$WORK/m.yaml" --pp "$pp" --vp "$vp" \
              --schedule "$sched" --mbs 1 --gbs "$m" --steps 6 2>&1 | grep '^step' | tail -3)
      measured=$(echo "$out" | awk '{for(i=1;i<=NF;i++) if($i=="bubble") {s+=$(i+1); n++}} END {printf "%.3f", s/n}')
      step=$(echo "$out" | awk '{for(i=1;i<=NF;i++) if($i=="step_s") {s+=$(i+1); n++}} END {printf "%.4f", s/n}')
      ideal=$(python3 -c "p,m,v=$pp,$m,$vp; print('%.3f' % ((p-1)/v/(m+(p-1)/v)))")
      printf "%-4s %-12s %-4s %-4s %-10s %-10s %s\n" "$pp" "$sched" "$vp" "$m" "$measured" "$ideal" "$step"
    done
  done
done
echo "(ranks beyond this machine's cores share them: with pp > cores the waits include time-slicing)"
