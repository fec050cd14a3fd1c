#!/bin/sh
# Fails if the shared library exports any symbol not starting with fx_,
# or exports no fx_ symbol at all.
set -eu
lib=$1
syms=$(nm -D --defined-only "$lib" | awk '{print $3}' | grep -v '^$')
bad=$(printf '%s\n' "$syms" | grep -v '^fx_' | grep -v '^FERROX_' || true)
if [ -n "$bad" ]; then
  echo "exported symbols without the fx_ prefix:"; echo "$bad"; exit 1
fi
count=$(printf '%s\n' "$syms" | grep -c '^fx_' || true)
if [ "$count" -lt 10 ]; then
  echo "only $count fx_ symbols exported"; exit 1
fi
soname=$(objdump -p "$lib" | awk '/SONAME/ {print $2}')
if [ "$soname" != "libferrox.so.0" ]; then
  echo "SONAME is '$soname', expected libferrox.so.0"; exit 1
fi
echo "exports ok: $count fx_ symbols, SONAME $soname"
