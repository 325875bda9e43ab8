#!/usr/bin/env bash
# How long capplan takes to refuse bad input that used to crash, hang or run for hours: models
# of 10,000 to 1,000,000 keys (half of them repeats of `layers`; 90,000 is under the node limit,
# 100,000 and more are over it), /dev/zero, a FIFO, a huge
# step simulation and run simulations whose checkpoint intervals fail far more often than not.
# Prints figures (wall seconds, exit status); asserts nothing. The same cases are tested for
# their messages in tests/app/cli/test_robustness.cpp.
# Usage: tests/bench/bench_bad_input.sh [BUILD_DIR]
set -euo pipefail
BUILD="${1:-build}"
CLI="$BUILD/bin/capplan"
[[ -x "$CLI" ]] || { echo "error: $CLI not found (build the capplan target)" >&2; exit 2; }
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# time_case LABEL ARGS...: wall seconds and exit status of `capplan ARGS` (killed after 600 s).
time_case() {
  local label="$1" t0 t1 rc
  shift
  t0=$(date +%s.%N)
  rc=0
  timeout 600 "$CLI" "$@" >/dev/null 2>&1 </dev/null || rc=$?
  t1=$(date +%s.%N)
  printf "%-62s %8s s  exit %d\n" "$label" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')" "$rc"
}

for n in 10000 90000 100000 1000000; do
  f="$WORK/keys_$n.yaml"
  { printf 'name: x\nlayers: 2\nhidden: 64\nheads: 4\nvocab: 100\nseq_len: 16\n'
    awk -v n="$n" 'BEGIN { for (i = 0; i < n; i++) if (i % 2 == 0) print "layers: " i; else print "k" i ": 1" }'
  } >"$f"
  time_case "profile --model <$n keys, half repeated>" profile --model "$f"
done
mkfifo "$WORK/fifo"
time_case "validate /dev/zero" validate /dev/zero
time_case "validate <a FIFO>" validate "$WORK/fifo"
time_case "simulate --pp 8 --gbs 1000000 (one node)" simulate --model gpt3-175b --cluster p4d.24xlarge \
  --nodes 1 --dp 1 --tp 1 --pp 8 --mbs 1 --gbs 1000000
time_case "simulate --plan default --run --node-mtbf-hours 20 --trials 10" simulate --plan default \
  --run --node-mtbf-hours 20 --trials 10
time_case "simulate --plan default --run --node-mtbf-hours 1e-9" simulate --plan default --run \
  --node-mtbf-hours 1e-9
time_case "plan --nodes 1:1000000" plan --model gpt3-175b --cluster p4d.24xlarge --nodes 1:1000000 --gbs 64
