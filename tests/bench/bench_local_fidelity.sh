#!/usr/bin/env bash
# How well the planner predicts `capplan run` on this machine: one `capplan profile --measure` of
# the 4-layer, 256-wide model (vocab 4096, seq 128, mbs 2, gbs 16), timed, then every layout of
# at most 8 ranks in the list below run for STEPS steps with the profile. Prints, per layout, the
# measured median step beside the prediction with the profile, the simulation with it, and the
# prediction without it (today's model: the probed GEMM peak and copy bandwidth), then every term measured vs predicted with the
# profile, and the targets (step within 10 %, every term within 20 % or 2 ms) as met / not met.
# The load average is printed before and after: the machine may be shared. Asserts nothing.
# Usage: tests/bench/bench_local_fidelity.sh [BUILD_DIR] [STEPS]
set -u
BUILD=${1:-${CAPPLAN_BUILD_DIR:-build}}
STEPS=${2:-12}
CAPPLAN="$BUILD/bin/capplan"
if [ ! -x "$CAPPLAN" ]; then
  echo "bench_local_fidelity: $CAPPLAN not found (build the capplan and capplan-train targets first)" >&2
  exit 2
fi
OUT=$(mktemp -d /tmp/capplan-bench-fidelity.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
MODEL="$OUT/model.yaml"
printf 'name: fidelity-4x256\nlayers: 4\nhidden: 256\nheads: 8\nvocab: 4096\nseq_len: 128\n' >"$MODEL"

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
t0=$(date +%s.%N)
if ! "$CAPPLAN" profile --model "$MODEL" --mbs 2 --seq 128 --measure --ranks 2 --out "$OUT/device.yaml" \
    >"$OUT/profile.txt" 2>&1; then
  echo "capplan profile --measure failed:"; tail -5 "$OUT/profile.txt"; exit 1
fi
t1=$(date +%s.%N)
echo "capplan profile --measure (2 ranks): $(python3 -c "print(f'{$t1 - $t0:.1f}')") s (target < 60 s)"
echo "this machine: $(nproc) cores online; the profile: $(sed -n 's/^  device: //p' "$OUT/device.yaml"), \
ranks $(sed -n 's/^  ranks: //p' "$OUT/device.yaml"), cores $(sed -n 's/^  cores: \([0-9]*\).*/\1/p' "$OUT/device.yaml")"
echo "  measured: $(sed -n 's/^  how: //p' "$OUT/device.yaml")"

# name | capplan run layout flags
LAYOUTS=(
  "dp2|--dp 2 --tp 1 --pp 1"
  "dp4|--dp 4 --tp 1 --pp 1"
  "dp8|--dp 8 --tp 1 --pp 1"
  "tp2|--dp 1 --tp 2 --pp 1"
  "tp4|--dp 1 --tp 4 --pp 1"
  "pp2|--dp 1 --tp 1 --pp 2"
  "pp4|--dp 1 --tp 1 --pp 4"
  "pp2-gpipe|--dp 1 --tp 1 --pp 2 --schedule gpipe"
  "dp2-tp2|--dp 2 --tp 2 --pp 1"
  "dp2-pp2|--dp 2 --tp 1 --pp 2"
  "tp2-pp2|--dp 1 --tp 2 --pp 2"
  "dp2-tp2-pp2|--dp 2 --tp 2 --pp 2"
  "dp2-zero1|--dp 2 --tp 1 --pp 1 --zero 1"
  "dp2-selective|--dp 2 --tp 1 --pp 1 --recompute selective"
  "tp2-full|--dp 1 --tp 2 --pp 1 --recompute full"
)
for entry in "${LAYOUTS[@]}"; do
  name=${entry%%|*}
  flags=${entry#*|}
  read -r -a f <<<"$flags"
  n=$(( ${f[1]} * ${f[3]} * ${f[5]} ))
  common=(--model "$MODEL" --cluster p4d.24xlarge --nodes 1 --gpus "$n" "${f[@]}" --mbs 2 --gbs 16 --seq 128)
  "$CAPPLAN" run "${common[@]}" --dry-run --dir "$OUT/plain-$name" --json >"$OUT/plain-$name.json" 2>/dev/null
  "$CAPPLAN" run "${common[@]}" --steps "$STEPS" --device-profile "$OUT/device.yaml" --timeout 300 \
    --dir "$OUT/$name" --json >"$OUT/$name.json" 2>"$OUT/$name.err" || true
done
echo "load average after:  $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$OUT" "${LAYOUTS[@]}" <<'EOF'
import json, math, os, sys
out, names = sys.argv[1], [e.split("|")[0] for e in sys.argv[2:]]
def ms(v):
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v * 1e3:.1f}"
def load(p):
    try:
        return json.load(open(p))
    except Exception:
        return None
terms = ["compute", "recompute", "bubble", "tp_comm", "pp_comm", "dp_comm", "optimizer", "offload"]
print(f"\n{'layout':<15}{'ranks':>6}  {'measured':>9}{'profile':>9}{'ratio':>7}{'sim':>9}{'ratio':>7}{'plain':>9}{'ratio':>7}  step<=10%  terms<=20%|2ms")
step_met = terms_met = ran = 0
details = []
for name in names:
    r, plain = load(os.path.join(out, name, "run.json")), load(os.path.join(out, f"plain-{name}.json"))
    if not r or r.get("status") != "succeeded":
        err = open(os.path.join(out, name + ".err")).read().strip().splitlines() if os.path.exists(os.path.join(out, name + ".err")) else []
        print(f"{name:<15} not run: {(r or {}).get('reason') or (err[-1] if err else 'no record')}")
        continue
    ran += 1
    ranks = r["run"]["ranks"]
    meas = r["measured"]["step_time_s"]
    pred = (r.get("predicted") or {}).get("step_time_s")
    pp = ((plain or {}).get("predicted") or {}).get("step_time_s")
    sim = (r.get("simulated") or {}).get("step_time_s")
    rows = {c["term"]: c for c in r["comparison"]}
    ok_step = pred is not None and abs(pred - meas) <= 0.10 * meas
    bad = []
    for t in terms:
        c = rows.get(t)
        if not c or c["measured_s"] is None or c["predicted_s"] is None:
            bad.append(t + "?")
            continue
        m, p = c["measured_s"], c["predicted_s"]
        if abs(p - m) > max(0.20 * m, 2e-3):
            bad.append(t)
    step_met += ok_step
    terms_met += not bad
    ratio = lambda p: f"{meas / p:.2f}" if p else "-"
    print(f"{name:<15}{ranks:>6}  {ms(meas):>9}{ms(pred):>9}{ratio(pred):>7}{ms(sim):>9}{ratio(sim):>7}{ms(pp):>9}{ratio(pp):>7}  "
          f"{'met' if ok_step else 'not met':<10} {'met' if not bad else 'not met: ' + ' '.join(bad)}")
    details.append((name, rows, plain))
print(f"\nstep within 10 %: {step_met} of {ran} layouts; every term within 20 % or 2 ms: {terms_met} of {ran}"
      " (ratio = measured / predicted; ms)")
print("\nper term, ms: measured / predicted with the profile / predicted without")
print(f"{'layout':<15}" + "".join(f"{t:>22}" for t in terms + ["remainder"]))
for name, rows, plain in details:
    prow = {k: v for k, v in (((plain or {}).get("predicted") or {}).get("breakdown_s") or {}).items()}
    cells = []
    for t in terms + ["remainder"]:
        c = rows.get(t, {})
        cells.append(f"{ms(c.get('measured_s'))}/{ms(c.get('predicted_s'))}/{ms(prow.get(t))}")
    print(f"{name:<15}" + "".join(f"{c:>22}" for c in cells))
EOF
