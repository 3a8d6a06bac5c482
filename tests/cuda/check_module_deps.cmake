# cmake -DMODULE=<libkairox_cuda.so> -DREADELF=<readelf> -P check_module_deps.cmake
# The module must need no CUDA library but the driver (the runtime is linked statically,
# so kairox runs where only a driver is installed), and must export only kx_cuda_get_api.
execute_process(COMMAND ${READELF} --dynamic --wide ${MODULE}
  OUTPUT_VARIABLE dynamic RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "readelf --dynamic ${MODULE} failed (${rc})")
endif()
string(REGEX MATCHALL "Shared library: \\[[^]]+\\]" needed "${dynamic}")
message(STATUS "${MODULE} needs: ${needed}")
if(needed MATCHES "libcudart|libcublas|libnvrtc")
  message(FATAL_ERROR "the CUDA module links a CUDA runtime library dynamically: ${needed}")
endif()
execute_process(COMMAND ${READELF} --dyn-syms --wide ${MODULE}
  OUTPUT_VARIABLE syms RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "readelf --dyn-syms ${MODULE} failed (${rc})")
endif()
# Defined (section index is a number, not UND) global or weak symbols.
string(REGEX MATCHALL "[0-9]+: [0-9a-f]+ +[0-9]+ (FUNC|OBJECT) +(GLOBAL|WEAK) +DEFAULT +[0-9]+ [^\n]+"
  exported "${syms}")
list(LENGTH exported n_exported)
if(NOT n_exported EQUAL 1 OR NOT exported MATCHES "kx_cuda_get_api")
  message(FATAL_ERROR "the CUDA module must export only kx_cuda_get_api, exports: ${exported}")
endif()
