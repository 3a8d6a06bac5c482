# System dependencies (Debian 12 packages; cmake/install_deps.sh installs them).
find_package(Threads REQUIRED)
find_package(absl REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json REQUIRED)
# oneDNN (libdnnl-dev): predictor training and batched prefill matmuls.
find_package(dnnl REQUIRED)
# OpenSSL (libssl-dev): SHA-256 of model files (libcrypto's accelerated one).
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
# CLI11 (libcli11-dev, header-only): the programs' command-line parsing.
find_package(CLI11 CONFIG REQUIRED)
# libedit (libedit-dev): line editing and history in kairox-chat.
find_package(PkgConfig REQUIRED)
pkg_check_modules(KX_LIBEDIT REQUIRED IMPORTED_TARGET libedit)
# cpp-httplib (libcpp-httplib-dev, a compiled library with OpenSSL, zlib and brotli support):
# kairox-server's HTTP. It ships a pkg-config file and no CMake package.
pkg_check_modules(KX_HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
# METIS (libmetis-dev) ships no CMake package: an imported target by hand.
find_path(KX_METIS_INCLUDE_DIR metis.h REQUIRED)
find_library(KX_METIS_LIBRARY metis REQUIRED)
add_library(kx_metis UNKNOWN IMPORTED)
set_target_properties(kx_metis PROPERTIES
  IMPORTED_LOCATION "${KX_METIS_LIBRARY}"
  INTERFACE_INCLUDE_DIRECTORIES "${KX_METIS_INCLUDE_DIR}")
# liburing (liburing-dev): the I/O executor's io_uring backend. Optional at
# build time too: without it IoExecutor has only its pread backend.
find_path(KX_URING_INCLUDE_DIR liburing.h)
find_library(KX_URING_LIBRARY uring)
if(KX_URING_INCLUDE_DIR AND KX_URING_LIBRARY)
  set(KX_HAVE_URING ON)
  add_library(kx_uring UNKNOWN IMPORTED)
  set_target_properties(kx_uring PROPERTIES
    IMPORTED_LOCATION "${KX_URING_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${KX_URING_INCLUDE_DIR}"
    INTERFACE_COMPILE_DEFINITIONS KX_HAVE_URING=1)
else()
  set(KX_HAVE_URING OFF)
  add_library(kx_uring INTERFACE)
  message(STATUS "liburing not found: the I/O executor uses pread threads only")
endif()
if(KX_BUILD_TESTS)
  find_package(Catch2 REQUIRED)
endif()
