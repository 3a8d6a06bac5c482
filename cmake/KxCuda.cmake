# The CUDA backend is an optional module (libkairox_cuda.so) that libkairox
# loads at run time, so kairox runs on machines without any CUDA library.
set(KX_HAVE_CUDA OFF)
if(NOT KX_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # Ampere (A100 sm_80, consumer sm_86) and Ada SASS, Hopper (H100, H200) SASS + PTX
      # for anything newer (JIT-compiled by the driver). Each architecture adds nvcc time:
      # sm_80 took the module from 74 to 94 s of CPU (-DCMAKE_CUDA_ARCHITECTURES=native
      # builds one).
      set(CMAKE_CUDA_ARCHITECTURES "80-real;86-real;89-real;90")
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(KX_HAVE_CUDA ON)
  elseif(KX_CUDA STREQUAL "ON")
    message(FATAL_ERROR "KX_CUDA=ON but no CUDA compiler was found")
  endif()
endif()
message(STATUS "kairox: CUDA backend ${KX_HAVE_CUDA}")
