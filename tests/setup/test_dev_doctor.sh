#!/usr/bin/env bash
# The dependency check checks: scripts/dev doctor passes on this build with the project's package
# list, and fails, naming the package, when libqt6opengl6-dev (the package whose absence once hid
# the whole GUI) is left out of a list given to it.
# Usage: test_dev_doctor.sh SOURCE_DIR BUILD_DIR
set -uo pipefail
src="$1" build="$2"
dev="$src/scripts/dev"
if ! grep -q '^Qt6OpenGL_DIR:PATH=/' "$build/CMakeCache.txt"; then
  echo "SKIP: this build did not use Qt6OpenGL (capplan-gui is not built), so there is nothing to leave out"
  exit 77
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

"$dev" packages > "$tmp/full.txt"
grep -qx libqt6opengl6-dev "$tmp/full.txt" || { echo "FAIL: libqt6opengl6-dev is not in 'scripts/dev packages'"; exit 1; }

# Expectation: the full list passes.
if ! "$dev" doctor --packages "$tmp/full.txt" --build "$build" > "$tmp/full.out" 2>&1; then
  echo "FAIL: doctor failed with the full package list:"; cat "$tmp/full.out"; exit 1
fi
grep -q '^doctor: ok:' "$tmp/full.out" || { echo "FAIL: no 'doctor: ok' line"; cat "$tmp/full.out"; exit 1; }

# Expectation: without libqt6opengl6-dev it fails with status 1 and names the package and the
# cache entry that used it.
grep -vx libqt6opengl6-dev "$tmp/full.txt" > "$tmp/short.txt"
"$dev" doctor --packages "$tmp/short.txt" --build "$build" > "$tmp/short.out" 2>&1
rc=$?
cat "$tmp/short.out"
[ $rc -eq 1 ] || { echo "FAIL: expected exit status 1 without libqt6opengl6-dev, got $rc"; exit 1; }
grep -q "Qt6OpenGL_DIR: .* belongs to Debian package 'libqt6opengl6-dev'" "$tmp/short.out" ||
  { echo "FAIL: the message does not name libqt6opengl6-dev and Qt6OpenGL_DIR"; exit 1; }

# Bad input: an unreadable list is refused with status 2.
"$dev" doctor --packages "$tmp/missing.txt" --build "$build" > "$tmp/bad.out" 2>&1
rc=$?
[ $rc -eq 2 ] || { echo "FAIL: a missing list gave status $rc, expected 2"; exit 1; }
grep -q "missing.txt: cannot read the package list" "$tmp/bad.out" || { echo "FAIL: message"; cat "$tmp/bad.out"; exit 1; }
echo "PASS"
