# Build options and the compile settings every kairox target shares.
option(KX_BUILD_TESTS "Build the test suite" ON)
option(KX_WERROR "Treat warnings as errors in kairox's own targets" ON)
option(KX_FUZZ "Build libFuzzer targets (needs clang)" OFF)
# OFF: the benchmark-only programs (kernel, grouping, predictor, graph and I/O micro-benchmarks,
# kairox-sim, kairox-synth) leave the default target; a test that needs one still builds it.
# The ASan preset sets it: those programs have no test that runs them under the sanitizers.
option(KX_BENCHMARK_PROGRAMS "Build the benchmark-only programs with the default target" ON)
set(KX_CUDA "AUTO" CACHE STRING "Build the CUDA backend module: AUTO (when nvcc is found), ON, OFF")
set_property(CACHE KX_CUDA PROPERTY STRINGS AUTO ON OFF)
set(KX_SANITIZE "" CACHE STRING "Sanitizers for the library and tests: '', address;undefined, thread")
# The sanitizer presets set -Og: their test and example programs' own sources (about half of an
# ASan+UBSan build's compile time at -O2) compile about twice as fast, while the library and the
# kernels, where the tests spend their time and whose code paths some tests compare bit for
# bit, keep the build type's -O2. Applied by tests/ and examples/ (kx_harness_optimize).
set(KX_HARNESS_OPTIMIZE "" CACHE STRING
    "Optimization flag for the test and example programs' own sources (empty: the build type's)")
# The test programs' own sources alone (tests/), where KX_HARNESS_OPTIMIZE is empty. The
# presets set -Og: at -O3 a test source's code generation (Catch2's expression templates) is
# 60 % of its compile time, -Og compiles it in about 60 % of the time, and a test spends its
# time in the library and kernels, which keep -O3. The examples (user programs) keep -O3.
set(KX_TEST_OPTIMIZE "" CACHE STRING
    "Optimization flag for the test programs' own sources (empty: the build type's)")

if(KX_SANITIZE)
  string(REPLACE ";" "," kx_san "${KX_SANITIZE}")
  add_compile_options(-fsanitize=${kx_san} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${kx_san})
  # GCC 12 + -fsanitize emits false -Wmaybe-uninitialized inside catch2's <regex> use.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    add_compile_options(-Wno-maybe-uninitialized)
  endif()
endif()

# kx_target_defaults(target): warnings, include roots. Never -march=native:
# ISA-specific kernels get their flags per source file (kernels/cpu).
function(kx_target_defaults target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX,C>:-Wall -Wextra -Wno-unused-parameter>
    # GCC 12 reports -Wrestrict/-Wstringop-overflow false positives inside
    # libstdc++'s std::string at -O3 (GCC bug 105329); they are not ours.
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-restrict -Wno-stringop-overflow>
    $<$<AND:$<COMPILE_LANGUAGE:CXX,C>,$<BOOL:${KX_WERROR}>>:-Werror>)
endfunction()

# kx_harness_optimize(): in examples/, their own sources at KX_HARNESS_OPTIMIZE.
# kx_test_optimize(): in tests/, their own sources at KX_HARNESS_OPTIMIZE, else at
# KX_TEST_OPTIMIZE.
macro(kx_harness_optimize)
  if(KX_HARNESS_OPTIMIZE)
    add_compile_options(${KX_HARNESS_OPTIMIZE})
  endif()
endmacro()
macro(kx_test_optimize)
  if(KX_HARNESS_OPTIMIZE)
    add_compile_options(${KX_HARNESS_OPTIMIZE})
  elseif(KX_TEST_OPTIMIZE)
    add_compile_options(${KX_TEST_OPTIMIZE})
  endif()
endmacro()
