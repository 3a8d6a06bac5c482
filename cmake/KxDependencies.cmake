# System dependencies (Debian 12 packages; cmake/setup.sh installs them).
find_package(Threads REQUIRED)
find_package(absl REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(dnnl QUIET)
if(KX_BUILD_TESTS)
  find_package(Catch2 REQUIRED)
endif()
