#!/usr/bin/env bash
# scripts/dev run on a build without capplan-gui stops with exit status 1 and says why, instead of
# starting something else. The build is configured with the GUI off (what a machine without Qt 6
# gets) in a folder of its own.
# Usage: test_dev_run_without_gui.sh SOURCE_DIR
set -uo pipefail
src="$1"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
cmake -S "$src" -B "$tmp/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCAPPLAN_BUILD_GUI=OFF \
  -DCAPPLAN_BUILD_TESTS=OFF -DCAPPLAN_BUILD_BENCH=OFF \
  $(command -v ccache >/dev/null && echo -DCMAKE_CXX_COMPILER_LAUNCHER=ccache) > "$tmp/configure.out" 2>&1 ||
  { cat "$tmp/configure.out"; echo "FAIL: configure"; exit 1; }
# CAPPLAN_SANITIZE (set when the whole suite runs under the sanitizers) would make the scratch
# build an instrumented one; what is checked here is the script's message, so the build is plain.
env -u CI -u CAPPLAN_SANITIZE CAPPLAN_BUILD_DIR="$tmp/build" "$src/scripts/dev" run > "$tmp/run.out" 2>&1
rc=$?
tail -n 3 "$tmp/run.out"
[ $rc -eq 1 ] || { echo "FAIL: expected exit status 1, got $rc"; exit 1; }
grep -q "run: error: capplan-gui was not built: not built: CAPPLAN_BUILD_GUI is OFF" "$tmp/run.out" ||
  { echo "FAIL: the reason is not printed"; exit 1; }
if grep -q "candidates\|samples/s" "$tmp/run.out"; then echo "FAIL: it ran the CLI instead"; exit 1; fi
echo "PASS"
