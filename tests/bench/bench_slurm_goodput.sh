#!/usr/bin/env bash
# Goodput of a Slurm run with one failure: a private single-host Slurm (tests/slurm/slurm_fixture.sh),
# `capplan run --slurm` of a 2-rank run of 200 steps with a checkpoint every 20, one rank SIGKILLed
# after step 45; prints the record's Slurm states, attempts and goodput (run.txt). Needs root and
# Debian's munge, slurmctld, slurmd and slurm-client. Prints figures; asserts nothing.
# Usage: tests/bench/bench_slurm_goodput.sh [BUILD_DIR]
set -euo pipefail
BUILD="$(realpath "${1:-build}")"
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CAPPLAN="$BUILD/bin/capplan"
TRAIN="$BUILD/bin/capplan-train"
for f in "$CAPPLAN" "$TRAIN"; do
  [[ -x "$f" ]] || { echo "error: $f not found (build the capplan and capplan-train targets)" >&2; exit 2; }
done
WORK="$(mktemp -d)"
stop() {
  "$SRC/tests/slurm/slurm_fixture.sh" stop "$WORK/slurm" >/dev/null || true
  rm -rf "$WORK"
}
trap stop EXIT
CAPPLAN_SLURM_PORT="${CAPPLAN_SLURM_PORT:-27817}" "$SRC/tests/slurm/slurm_fixture.sh" start "$WORK/slurm"
[[ -f "$WORK/slurm/env" ]] || { echo "error: the private Slurm did not start: $(cat "$WORK/slurm/skip")" >&2; exit 1; }
set -a
# shellcheck disable=SC1091
. "$WORK/slurm/env"
set +a
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 CAPPLAN_TRAIN="$TRAIN"
cat > "$WORK/tiny.yaml" <<YAML
name: tiny
layers: 2
hidden: 128
heads: 4
vocab: 256
seq_len: 64
YAML
RUN="$WORK/run"
"$CAPPLAN" run --slurm --requeue 2 --model "$WORK/tiny.yaml" --cluster p4d.24xlarge --nodes 1 --gpus 2 \
  --dp 2 --tp 1 --pp 1 --mbs 1 --gbs 8 --steps 200 --checkpoint-every 20 --peak-gflops 100 \
  --dir "$RUN" > "$WORK/capplan.log" 2>&1 &
pid=$!
newest() { grep -o '"type":"step","step":[0-9]*' "$RUN/metrics.jsonl" 2>/dev/null | tail -n 1 | grep -o '[0-9]*$' || echo 0; }
for _ in $(seq 1 3000); do [[ "$(newest)" -ge 45 ]] && break; sleep 0.02; done
rank=$(pgrep -f -- "--metrics $RUN/metrics.jsonl" | tail -n 1)
echo "killing rank pid $rank after step $(newest)"
kill -KILL "$rank"
wait "$pid" || true
sed -n '/^Slurm job/,$p' "$RUN/run.txt"
