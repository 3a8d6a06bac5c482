# System dependencies (Debian 12 packages; cmake/install_deps.sh installs them).
find_package(Threads REQUIRED)
find_package(absl REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json REQUIRED)
# oneDNN (libdnnl-dev): predictor training and batched prefill matmuls.
find_package(dnnl REQUIRED)
# METIS (libmetis-dev) ships no CMake package: an imported target by hand.
find_path(KX_METIS_INCLUDE_DIR metis.h REQUIRED)
find_library(KX_METIS_LIBRARY metis REQUIRED)
add_library(kx_metis UNKNOWN IMPORTED)
set_target_properties(kx_metis PROPERTIES
  IMPORTED_LOCATION "${KX_METIS_LIBRARY}"
  INTERFACE_INCLUDE_DIRECTORIES "${KX_METIS_INCLUDE_DIR}")
if(KX_BUILD_TESTS)
  find_package(Catch2 REQUIRED)
endif()
