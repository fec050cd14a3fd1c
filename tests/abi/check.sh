#!/bin/sh
# usage: check.sh LIBFERROX.SO HEADERS_DIR BASELINE.abi SUPPRESSIONS
#
# Compares the built library's ABI with the committed baseline
# (tests/abi/libferrox.abi); ctest runs it as `abi_check`. What may change
# without a SONAME bump is what docs/abi.md promises: new
# functions, and parameter/info structs growing at the end (the
# suppressions file). Anything else -- a removed or changed function, a
# reordered, retyped or removed field, a changed enumerator -- fails, until
# the baseline is regenerated on purpose together with a SONAME bump
# (FERROX_SOVERSION in CMakeLists.txt).
#
# Regenerating the baseline -- whoever changes a declaration in
# include/ferrox.h does it in the same commit: after an intended ABI change
# with its SONAME bump, and also after an allowed addition, so that the
# next change is measured against it. (The committed baseline was
# regenerated when the fx_*_init functions became inline over the exported
# fx_*_init_sized, without a SONAME bump: ferrox is unreleased, see docs/abi.md.)
# Build the
# default build (RelWithDebInfo, so -g), then from the source root
#
#   abidw --drop-private-types --no-corpus-path --no-comp-dir-path --short-locs \
#         --headers-dir include build/lib/libferrox.so > tests/abi/libferrox.abi
#
# Exit: 0 same or compatible, 1 an incompatible change, 77 abidiff (Debian:
# abigail-tools) missing or the library built without debug info (ctest
# reports a skip).
set -eu
lib=$1 headers=$2 baseline=$3 supp=$4
if ! command -v abidiff >/dev/null 2>&1 || ! command -v abidw >/dev/null 2>&1; then
  echo "abidiff/abidw not found (Debian: abigail-tools); skipping"
  exit 77
fi
if ! command -v python3 >/dev/null 2>&1; then
  echo "python3 not found (it runs the struct layout half); skipping"
  exit 77
fi
here=$(cd "$(dirname "$0")" && pwd)
# Types come from DWARF: a build without -g (a plain Release build) has
# nothing to compare. RelWithDebInfo and Debug have it.
if command -v readelf >/dev/null 2>&1 &&
   ! readelf -S "$lib" | grep -q '\.debug_info'; then
  echo "$lib has no debug info (build with -g, e.g. RelWithDebInfo); skipping"
  exit 77
fi
current=$(mktemp)
trap 'rm -f "$current"' EXIT
abidw --drop-private-types --no-corpus-path --no-comp-dir-path --short-locs \
      --headers-dir "$headers" "$lib" > "$current"
# --no-added-syms: new functions are allowed (additions are how the API
# grows). Everything else abidiff reports, after the suppressions, fails:
# bit 4 (ABI change) as well as 8 (incompatible), since abidiff sets 8 only
# for removed symbols and a changed struct layout is just as fatal.
set +e
abidiff --no-added-syms --suppressions "$supp" \
        --headers-dir1 "$headers" --headers-dir2 "$headers" \
        "$baseline" "$current"
rc=$?
# The suppression above also hides a member changed inside a struct that
# grew (libabigail 2.2); layout.py compares every public struct member by
# member (see its docstring).
python3 "$here/layout.py" "$baseline" "$current"
lrc=$?
set -e
if [ "$rc" -ge 128 ]; then
  # A crash of the tool, not a verdict: libabigail 2.2 segfaults comparing
  # the baseline with what abidw reads from clang 14's DWARF. The layout
  # half still counts; the run is reported as skipped so it shows.
  echo "abidiff crashed (signal $((rc - 128))) on this build's debug info;"
  echo "only the member-by-member layout check ran (layout.py exit $lrc)"
  [ "$lrc" -eq 0 ] && exit 77
  exit 1
fi
if [ "$rc" -eq 0 ] && [ "$lrc" -eq 0 ]; then
  echo "ABI matches the baseline (additions allowed)"
  exit 0
fi
if [ $((rc & 2)) -ne 0 ] || { [ "$rc" -ne 0 ] && [ $((rc & 12)) -eq 0 ]; } ||
   [ "$lrc" -gt 1 ]; then
  echo "the ABI check failed to run (abidiff exit $rc, layout.py exit $lrc)"
  exit 1
fi
echo "ABI differs from tests/abi/libferrox.abi: an existing public type or"
echo "function changed. Undo it, or bump the SONAME and regenerate the"
echo "baseline on purpose (see the usage at the top of tests/abi/check.sh)."
exit 1
