#!/bin/sh
# usage: check_static_exports.sh LIBFERROX.A|OBJECT.o [NM]
# Fails if any object of the static library defines an external symbol
# whose name does not start with fx_, or if it defines no fx_ symbol.
# Everything in libferrox.a is linked into the host's own program, where a
# global such as kv_ref would collide with the host's, or with another
# library's; -fvisibility=hidden and the version script only fence the
# shared library. Names the compiler makes for its own instrumentation
# (the sanitizers' __asan_* / __ubsan_* / __odr_asan_gen_*, and GCC's
# __odr_asan.NAME indicator for an exported global NAME) are not ours.
set -eu
lib=$1 nm=${2:-nm}
syms=$("$nm" -g --defined-only "$lib" | awk 'NF == 3 {print $3}' | sort -u)
bad=$(printf '%s\n' "$syms" | grep -v '^$' | grep -v '^fx_' |
      grep -Ev '^(__asan_|__ubsan_|__odr_asan_gen_|__odr_asan\.fx_|__sanitizer_)' || true)
if [ -n "$bad" ]; then
  echo "external symbols of $lib without the fx_ prefix:"; echo "$bad"; exit 1
fi
count=$(printf '%s\n' "$syms" | grep -c '^fx_' || true)
if [ "$count" -lt 10 ]; then
  echo "only $count fx_ symbols defined in $lib"; exit 1
fi
echo "static library ok: $count external symbols, all fx_"
