#!/usr/bin/env bash
# scripts/dev gpu-check parses (bash -n) and, on a machine without an NVIDIA GPU, stops at once
# with exit status 1 and the reason, before building or training anything. Skipped (77) where a
# GPU is visible: there the check itself is what runs.
# Usage: test_dev_gpu_check.sh SOURCE_DIR
set -uo pipefail
src="$1"
bash -n "$src/scripts/dev" || { echo "FAIL: scripts/dev does not parse"; exit 1; }
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIP: a GPU is visible (nvidia-smi -L): run scripts/dev gpu-check itself"; exit 77
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
CAPPLAN_BUILD_DIR="$tmp/none" timeout 60 "$src/scripts/dev" gpu-check > "$tmp/out" 2>&1
rc=$?
cat "$tmp/out"
[ $rc -eq 1 ] || { echo "FAIL: expected exit status 1, got $rc"; exit 1; }
grep -q "^gpu-check: no GPU" "$tmp/out" || { echo "FAIL: the reason is not printed"; exit 1; }
if grep -q "built for" "$tmp/out"; then echo "FAIL: it built anyway"; exit 1; fi
echo "PASS"
