#!/usr/bin/env bash
# Installs a kairox build into a scratch prefix and checks what users of the package get:
# - every program in bin/ (and libkairox_cuda.so in lib/ when it was built), each running
#   from there;
# - an outside CMake project (tests/install/project) with find_package(kairox): the C program
#   and the C++ wrapper on the shared library, the wrapper on the static archive
#   (COMPONENTS static), and a C program on the static archive through kairox-static.pc;
# - the shared library's users in isolation: the same project, and a C program through
#   pkg-config, where nothing but the install prefix can be found (CMAKE_FIND_ROOT_PATH and
#   PKG_CONFIG_LIBDIR point there only): they build with the installed header, libkairox.so
#   and the C++ runtime alone — no Abseil, spdlog or oneDNN package, no defines in the cflags.
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
fail() { echo "FAIL: $*"; exit 1; }

programs=(kairox-cli kairox-chat kairox-server kairox-perplexity kairox-prepare kairox-bench)
targets=(kairox kairox_static "${programs[@]}")
with_cuda=0
if cmake --build "$build" --target help | grep -q '^kairox_cuda:'; then
  targets+=(kairox_cuda)
  with_cuda=1
fi
cmake --build "$build" --target "${targets[@]}"
cmake --install "$build" --prefix "$prefix" >/dev/null
expected=(include/kairox/kairox.h include/kairox/kairox.hpp include/kairox/version.h
          lib/libkairox.so lib/libkairox.a lib/cmake/kairox/kairoxConfig.cmake
          lib/cmake/kairox/kairoxTargets.cmake lib/cmake/kairox/kairoxStaticTargets.cmake
          lib/pkgconfig/kairox.pc lib/pkgconfig/kairox-static.pc)
for p in "${programs[@]}"; do expected+=("bin/$p"); done
((with_cuda)) && expected+=(lib/libkairox_cuda.so)
for f in "${expected[@]}"; do
  [[ -e $prefix/$f ]] || fail "cmake --install did not put $f in place"
done
for p in kairox-cli kairox-chat kairox-server kairox-perplexity kairox-bench; do
  "$prefix/bin/$p" --version >/dev/null || fail "installed $p --version"
done
"$prefix/bin/kairox-prepare" --help >/dev/null || fail "installed kairox-prepare --help"
echo "hello" | "$prefix/bin/kairox-chat" -m "$model" -n 8 >/dev/null

# find_package(kairox), with the machine's packages in view: shared and static.
cmake -S "$here/project" -B "$scratch/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$scratch/build"
"$scratch/build/external_c" "$model"
"$scratch/build/external_cpp" "$model"
"$scratch/build/external_cpp_static" "$model"
if ldd "$scratch/build/external_cpp_static" | grep -q libkairox; then
  fail "external_cpp_static should not need libkairox.so"
fi

# kairox-static.pc: a C program on the static archive.
PKG_CONFIG_PATH=$prefix/lib/pkgconfig cc -std=c99 -Wall -Werror "$here/project/main.c" \
  -o "$scratch/external_pc_static" $(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags --libs kairox-static)
"$scratch/external_pc_static" "$model"
if ldd "$scratch/external_pc_static" | grep -q libkairox; then
  fail "external_pc_static should not need libkairox.so"
fi

# The shared library where only the install prefix can be searched: CMake finds packages,
# libraries and headers under it alone (KX_EXTERNAL_ISOLATED: the project fails if spdlog's
# package is found anyway), and the link names nothing but libkairox.
cmake -S "$here/project" -B "$scratch/build-isolated" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DKX_EXTERNAL_STATIC=OFF -DKX_EXTERNAL_ISOLATED=ON --no-warn-unused-cli \
  -DCMAKE_FIND_ROOT_PATH="$prefix" -DCMAKE_PREFIX_PATH=/ -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
  -DCMAKE_FIND_ROOT_PATH_MODE_PACKAGE=ONLY -DCMAKE_FIND_ROOT_PATH_MODE_LIBRARY=ONLY \
  -DCMAKE_FIND_ROOT_PATH_MODE_INCLUDE=ONLY -DCMAKE_FIND_ROOT_PATH_MODE_PROGRAM=NEVER >/dev/null
cmake --build "$scratch/build-isolated"
links=$(ninja -C "$scratch/build-isolated" -t commands external_c external_cpp | grep -- ' -o ')
if grep -qE 'absl|spdlog|dnnl|fmt|metis' <<<"$links"; then
  fail "the shared library's users link more than libkairox: $links"
fi
"$scratch/build-isolated/external_c" "$model"
"$scratch/build-isolated/external_cpp" "$model"

# pkg-config with the install prefix as its only search path.
(
  unset PKG_CONFIG_PATH
  export PKG_CONFIG_LIBDIR=$prefix/lib/pkgconfig
  if pkg-config --exists spdlog; then fail "pkg-config still finds spdlog: not isolated"; fi
  cflags=$(pkg-config --cflags kairox) || fail "pkg-config --cflags kairox"
  libs=$(pkg-config --libs kairox) || fail "pkg-config --libs kairox"
  [[ $cflags != *-D* ]] || fail "kairox.pc's cflags carry defines: $cflags"
  if grep -qE 'absl|spdlog|fmt|dnnl' <<<"$cflags $libs"; then
    fail "kairox.pc names other packages: $cflags $libs"
  fi
  cc -std=c99 -Wall -Werror "$here/project/main.c" -o "$scratch/external_pc" $cflags $libs
)
LD_LIBRARY_PATH=$prefix/lib "$scratch/external_pc" "$model"

echo "install test: OK"
