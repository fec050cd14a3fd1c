# Fuzz targets (tests/fuzz/README.md).
#
# Always: each target is built with the normal compiler as a replay driver
# (fuzz/replay_main.c supplies main) that runs its seed corpus
# tests/fuzz/corpus/<target>/ -- registered as the ctest test
# fuzz_<target>_replay, fast, and run under ASan in a FERROX_SANITIZE build.
#
# FERROX_FUZZ=ON (clang only): also the real libFuzzer binaries
# tests/fuzz/fuzz_<target>, linked against a copy of the library compiled
# with -fsanitize=fuzzer-no-link,address,undefined so that libFuzzer sees
# the library's coverage. The normal library targets are left alone.
option(FERROX_FUZZ "Build the libFuzzer targets (needs clang)" OFF)

# Paths from the project root, so this file works wherever it is included.
set(FX_FUZZ_TESTS ${PROJECT_SOURCE_DIR}/tests)
set(FX_FUZZ_DIR ${FX_FUZZ_TESTS}/fuzz)
set(FX_FUZZ_BIN ${PROJECT_BINARY_DIR}/tests)
set(FX_FUZZ_TARGETS gguf tokenizer text api grammar jinja)
if(NOT EXISTS ${PROJECT_SOURCE_DIR}/lib/sample/grammar.h)
  list(REMOVE_ITEM FX_FUZZ_TARGETS grammar)
endif()

# Support code the targets share: the GGUF writer and fuzz_common.c.
function(fx_fuzz_support name)
  add_library(${name} STATIC ${FX_FUZZ_TESTS}/support/gguf_writer.c
              ${FX_FUZZ_DIR}/fuzz_common.c)
  target_include_directories(${name} PUBLIC ${FX_FUZZ_DIR}
    ${FX_FUZZ_TESTS}/support ${PROJECT_SOURCE_DIR}/lib
    ${PROJECT_SOURCE_DIR}/include)
  target_compile_definitions(${name} PUBLIC FX_TEST_DATA_DIR="${FX_TEST_DATA_DIR}"
                             FERROX_STATIC)
endfunction()

# ---- replay drivers (normal compiler) ----
fx_fuzz_support(fx_fuzz_support)
target_link_libraries(fx_fuzz_support PUBLIC ferrox_static)
ferrox_warnings(fx_fuzz_support)
foreach(t IN LISTS FX_FUZZ_TARGETS)
  add_executable(fuzz_${t}_replay ${FX_FUZZ_DIR}/fuzz_${t}.c
                 ${FX_FUZZ_DIR}/replay_main.c)
  target_link_libraries(fuzz_${t}_replay PRIVATE fx_fuzz_support ferrox_static)
  ferrox_warnings(fuzz_${t}_replay)
  set(_dirs ${FX_FUZZ_DIR}/corpus/${t})
  add_test(NAME fuzz_${t}_replay COMMAND fuzz_${t}_replay ${_dirs})
  set_tests_properties(fuzz_${t}_replay PROPERTIES
    ENVIRONMENT "TMPDIR=${FX_FUZZ_BIN}" TIMEOUT 300)
endforeach()

# ---- libFuzzer binaries ----
if(FERROX_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "FERROX_FUZZ=ON needs clang: configure with CC=clang")
  endif()
  # -O1 as libFuzzer's and ASan's guides advise: at -O0 the kernels'
  # always-inline templates make objects of tens of MB.
  set(_fx_fuzz_flags -O1 -fsanitize=fuzzer-no-link,address,undefined
      -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g)
  # The library again, instrumented, from the same source list.
  get_target_property(_fx_lib_sources ferrox_obj SOURCES)
  get_target_property(_fx_lib_libs ferrox_static INTERFACE_LINK_LIBRARIES)
  # The AVX2 and AVX-512 kernels get ASan alone: with coverage and UBSan
  # clang 14 takes 14 minutes on qdot_avx512_k.c (ASan alone under two),
  # and their branches follow shapes the loader checked, not the input's
  # bytes, so coverage there would not steer the fuzzer anywhere.
  set(_fx_fuzz_simd_sources ${_fx_lib_sources})
  list(FILTER _fx_fuzz_simd_sources INCLUDE REGEX "_avx(2|512)[^/]*\\.c$")
  list(REMOVE_ITEM _fx_lib_sources ${_fx_fuzz_simd_sources})
  add_library(fx_fuzz_simd OBJECT ${_fx_fuzz_simd_sources})
  target_include_directories(fx_fuzz_simd PRIVATE ${PROJECT_SOURCE_DIR}/include)
  target_compile_definitions(fx_fuzz_simd PRIVATE FERROX_BUILDING _GNU_SOURCE
                             FERROX_STATIC)
  target_compile_options(fx_fuzz_simd PRIVATE -O1 -fsanitize=address
                         -fno-omit-frame-pointer -g)
  add_library(fx_fuzz_lib STATIC ${_fx_lib_sources}
              $<TARGET_OBJECTS:fx_fuzz_simd>)
  target_include_directories(fx_fuzz_lib PUBLIC ${PROJECT_SOURCE_DIR}/include)
  target_compile_definitions(fx_fuzz_lib PRIVATE FERROX_BUILDING _GNU_SOURCE
                             PUBLIC FERROX_STATIC)
  target_compile_options(fx_fuzz_lib PRIVATE ${_fx_fuzz_flags})
  target_link_libraries(fx_fuzz_lib PUBLIC ${_fx_lib_libs})

  # A known finding that would stop every run at its first input can be
  # set aside while it waits for its fix: the listed library sources
  # (relative to the project root) of this instrumented copy are compiled
  # without UBSan's pointer-overflow check. Empty by default.
  set(FX_FUZZ_UBSAN_SKIP "" CACHE STRING
      "Library sources fuzzed without -fsanitize=pointer-overflow")
  foreach(_f IN LISTS FX_FUZZ_UBSAN_SKIP)
    set_property(SOURCE ${PROJECT_SOURCE_DIR}/${_f} APPEND PROPERTY
                 COMPILE_OPTIONS -fno-sanitize=pointer-overflow)
  endforeach()

  fx_fuzz_support(fx_fuzz_support_inst)
  target_compile_options(fx_fuzz_support_inst PRIVATE ${_fx_fuzz_flags})
  target_link_libraries(fx_fuzz_support_inst PUBLIC fx_fuzz_lib)

  file(MAKE_DIRECTORY ${FX_FUZZ_BIN}/fuzz)
  foreach(t IN LISTS FX_FUZZ_TARGETS)
    add_executable(fuzz_${t} ${FX_FUZZ_DIR}/fuzz_${t}.c)
    target_compile_options(fuzz_${t} PRIVATE ${_fx_fuzz_flags})
    target_link_options(fuzz_${t} PRIVATE
      -fsanitize=fuzzer,address,undefined)
    target_link_libraries(fuzz_${t} PRIVATE fx_fuzz_support_inst fx_fuzz_lib)
    set_target_properties(fuzz_${t} PROPERTIES
      RUNTIME_OUTPUT_DIRECTORY ${FX_FUZZ_BIN}/fuzz)
    ferrox_warnings(fuzz_${t})
  endforeach()
endif()
