#!/bin/sh
# usage: run.sh BUILD_DIR WORK_DIR CONSUMER_SRC_DIR CC
set -eu
build=$1 work=$2 src=$3 cc=$4
# Under the sanitizer build the library needs the sanitizer runtime too.
extra=${FX_CONSUMER_FLAGS:-}
rm -rf "$work"
mkdir -p "$work"
prefix="$work/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
libdir=$(ls -d "$prefix"/lib*/pkgconfig | head -n1 | xargs dirname)

# The CMake package names its dependencies, never a path on the machine
# that built it (that path means nothing on another one).
if grep -nE '/[^";]*libutf8proc[.](so|a)' "$libdir"/cmake/ferrox/*.cmake; then
  echo "the CMake package hard-codes a utf8proc path"; exit 1
fi

# pkg-config, shared
PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --exists ferrox
cflags=$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags ferrox)
libs=$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --libs ferrox)
# shellcheck disable=SC2086
"$cc" $extra $cflags "$src/main.c" -o "$work/pc_shared" $libs -Wl,-rpath,"$libdir"
"$work/pc_shared"

# pkg-config, static
slibs=$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --static --libs ferrox)
# shellcheck disable=SC2086
"$cc" $extra $cflags -DFERROX_STATIC "$src/main.c" -o "$work/pc_static" \
  "$libdir/libferrox.a" $(echo "$slibs" | sed 's/-lferrox//')
"$work/pc_static"

# CMake find_package, both libraries
cmake -S "$src" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_RPATH="$libdir" \
  -DCMAKE_C_FLAGS="$extra" -DCMAKE_EXE_LINKER_FLAGS="$extra" >/dev/null
cmake --build "$work/cmake-build" >/dev/null
"$work/cmake-build/consumer_shared"
"$work/cmake-build/consumer_static"
