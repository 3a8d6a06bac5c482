#!/usr/bin/env bash
# Installs a kairox build into a scratch prefix, then builds a separate CMake
# project (tests/install/project) against it with find_package(kairox) — the C
# program on the shared library, the C++ one on the static archive — plus a C
# program through pkg-config, and runs them on MODEL.
#
#   tests/install/run.sh BUILD_DIR MODEL.gguf [SCRATCH_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$1
model=$2
scratch=${3:-$build/install-test}
rm -rf "$scratch"
mkdir -p "$scratch"
# Absolute: CMAKE_PREFIX_PATH and the rpath-less runs below must not depend on the cwd.
scratch=$(cd "$scratch" && pwd)
prefix=$scratch/prefix

cmake --build "$build" --target kairox kairox_static kairox-chat
cmake --install "$build" --prefix "$prefix" >/dev/null
for f in include/kairox/kairox.h include/kairox/kairox.hpp include/kairox/version.h \
         lib/libkairox.so lib/libkairox.a lib/cmake/kairox/kairoxConfig.cmake \
         lib/pkgconfig/kairox.pc bin/kairox-chat; do
  [[ -e $prefix/$f ]] || { echo "FAIL: cmake --install did not put $f in place"; exit 1; }
done

cmake -S "$here/project" -B "$scratch/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$scratch/build"
"$scratch/build/external_c" "$model"
"$scratch/build/external_cpp_static" "$model"
if ldd "$scratch/build/external_cpp_static" | grep -q libkairox; then
  echo "FAIL: external_cpp_static should not need libkairox.so"; exit 1
fi

# pkg-config, the shared library, run with the installed library path.
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
cc -std=c99 -Wall -Werror "$here/project/main.c" -o "$scratch/external_pc" $(pkg-config --cflags --libs kairox)
LD_LIBRARY_PATH=$prefix/lib "$scratch/external_pc" "$model"

echo "hello" | "$prefix/bin/kairox-chat" -m "$model" -n 8 >/dev/null
echo "install test: OK"
