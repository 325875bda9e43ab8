#!/usr/bin/env bash
# Measured vs predicted step time on this machine: `capplan run --scale-down` of GPT-2 124M's
# layouts on 2, 4 and 8 ranks, each next to the planner's estimate and the simulator's step for
# the same scaled run on the cluster spec of this machine; with pp > 1, the measured bubble share
# (capplan-train's time waiting for pipeline neighbours) next to (p-1)/(m+p-1) and the planner's.
# Prints figures; asserts nothing.
# Usage: tests/bench/bench_launch.sh [BUILD_DIR] [STEPS]
set -u
BUILD=${1:-build}
STEPS=${2:-8}
CAPPLAN="$BUILD/bin/capplan"
if [ ! -x "$CAPPLAN" ]; then
  echo "bench_launch: $CAPPLAN not found (build the capplan and capplan-train targets first)" >&2
  exit 2
fi
OUT=$(mktemp -d /tmp/capplan-bench-launch.XXXXXX)
trap 'rm -rf "$OUT"' EXIT

# dp tp pp
LAYOUTS=("2 1 1" "1 2 1" "4 1 1" "2 2 1" "1 4 1" "1 1 2" "2 1 2" "1 1 4" "8 1 1" "4 2 1" "2 2 2" "2 1 4" "1 2 4")
for l in "${LAYOUTS[@]}"; do
  read -r dp tp pp <<<"$l"
  n=$((dp * tp * pp))
  dir="$OUT/dp$dp-tp$tp-pp$pp"
  "$CAPPLAN" run --model gpt2-124m --cluster p4d.24xlarge --nodes 1 --gpus "$n" \
    --dp "$dp" --tp "$tp" --pp "$pp" --mbs 1 --gbs $((dp * 16)) --scale-down --steps "$STEPS" \
    --dir "$dir" --json >"$dir.json" 2>"$dir.err" || true
done

python3 - "$OUT" <<'EOF'
import json, math, os, sys
out = sys.argv[1]
def f(v, scale=1e3, unit="ms"):
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v * scale:.1f} {unit}"
print(f"{'layout':<16}{'ranks':>6}{'m':>4}  {'predicted':>11}{'simulated':>11}{'measured':>11}{'meas/pred':>10}  bubble measured vs (p-1)/(m+p-1)")
for name in sorted(os.listdir(out)):
    if not name.endswith(".json"):
        continue
    path = os.path.join(out, name[:-5], "run.json")
    label = name[:-5].replace("-", " ")
    try:
        r = json.load(open(path))
    except Exception:
        err = open(os.path.join(out, name[:-5] + ".err")).read().strip().splitlines()
        print(f"{label:<16} not run: {err[-1] if err else 'no record'}")
        continue
    lay = r["run"]["layout"]
    ranks = lay["dp"] * lay["tp"] * lay["pp"]
    m = lay["num_microbatches"]
    if r["status"] != "succeeded":
        print(f"{label:<16}{ranks:>6}{m:>4}  {r['status']}: {r['reason'][:90]}")
        continue
    pred = (r.get("predicted") or {}).get("step_time_s")
    sim = (r.get("simulated") or {}).get("step_time_s")
    meas = r["measured"]["step_time_s"]
    ratio = f"{meas / pred:.1f}x" if pred and meas else "-"
    p = lay["pp"]
    bubble = "-"
    if p > 1:
        want = (p - 1) / (m + p - 1)
        got = r["measured"].get("bubble_fraction")
        pb = (r.get("predicted") or {}).get("bubble_fraction")
        bubble = (f"{got:.2f}" if got is not None else "not timed") + f" vs {want:.2f}" + \
                 (f" (predicted {pb:.2f})" if pb is not None else "")
    print(f"{label:<16}{ranks:>6}{m:>4}  {f(pred):>11}{f(sim):>11}{f(meas):>11}{ratio:>10}  {bubble}")
mach = None
for name in sorted(os.listdir(out)):
    p = os.path.join(out, name, "run.json")
    if os.path.isfile(p):
        mach = json.load(open(p))["machine"]
        break
if mach:
    print(f"\nthis machine: {mach['cores']} cores, fp32 GEMM peak {mach['gemm_peak_gflops']:.1f} GFLOP/s "
          f"({mach['gemm_peak_source']}), copy {mach['memory_gbyte_per_s']:.1f} GB/s")
EOF
