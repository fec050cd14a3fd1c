# Tensor kernels (lib/kernels): reach into lib/, so static library only.
fx_add_test(test_kernels_matmul SOURCES test_kernels_matmul.c INTERNAL)
fx_add_test(test_kernels_ops SOURCES test_kernels_ops.c INTERNAL)
fx_add_test(test_kernels_gelu SOURCES test_kernels_gelu.c INTERNAL)
fx_add_test(test_qmatmul SOURCES test_qmatmul.c INTERNAL)
fx_add_test(test_quant_legacy SOURCES test_quant_legacy.c INTERNAL)
fx_add_test(test_quant_kquants SOURCES test_quant_kquants.c INTERNAL)
# Its pool test counts sleeps across short gaps between runs: another test
# on the other core would deschedule the polling threads.
set_tests_properties(test_kernels_ops_static PROPERTIES RUN_SERIAL TRUE)

# The benchmark is built with the tests but not registered: its numbers
# mean something only on a quiet machine, run by hand:
#   ./tests/bench_kernels [--quick]
# Its report names OpenBLAS's kernels (openblas_get_corename), so it links
# OpenBLAS itself; the library only loads it at run time, for the fast
# mode, which times sgemm here.
find_package(PkgConfig QUIET)
pkg_check_modules(FX_TEST_OPENBLAS QUIET openblas)
if(FX_TEST_OPENBLAS_FOUND)
  set(_fx_test_openblas ${FX_TEST_OPENBLAS_LINK_LIBRARIES})
else()
  find_library(FX_TEST_OPENBLAS_LIBRARY openblas)
  set(_fx_test_openblas ${FX_TEST_OPENBLAS_LIBRARY})
endif()
if(_fx_test_openblas)
  add_executable(bench_kernels bench_kernels.c)
  target_link_libraries(bench_kernels PRIVATE ferrox_static ${_fx_test_openblas})
  target_include_directories(bench_kernels PRIVATE ${PROJECT_SOURCE_DIR}/lib
                             ${CMAKE_CURRENT_SOURCE_DIR}/support)
  ferrox_warnings(bench_kernels)
endif()

# Blocking must not change a single bit (kernels.h): the matmul tests again,
# against the kernels compiled with tiny blocks (a 3-column panel, 4-row
# block, 40-wide K slabs (AVX-512), 12-row W groups (AVX2), a 16 KiB Q8_0
# activation buffer that takes a dozen rows at a time), so every block,
# slab, group, chunk and task edge is crossed many times even by small
# shapes.
set(_fx_kernel_srcs convert.c cpu.c matmul.c matmul_avx2.c matmul_avx512.c
  matmul_portable.c matmul_q8.c matmul_q8_avx512.c ops.c pool.c
  qr16.c qtypes.c qdot_portable.c qdot_avx2.c qdot_avx2_k.c qdot_avx2_r16.c qdot_avx2_r16_wide.c
  qdot_avx512.c qdot_avx512_k.c
  qdot_avx512_r16.c
  quant_legacy.c
  quant_iq4.c quant_kquants.c quant_kquants_search.c)
list(TRANSFORM _fx_kernel_srcs PREPEND ${PROJECT_SOURCE_DIR}/lib/kernels/)
# OpenBLAS is not linked here either: the fast-mode tests load it at run
# time, as the library does.
add_executable(test_kernels_blocking test_kernels_matmul.c
               ${_fx_kernel_srcs} ${PROJECT_SOURCE_DIR}/lib/core/core.c)
target_compile_definitions(test_kernels_blocking PRIVATE
  FX_MM_NC=3 FX_MM_MC=4 FX_MM_KC512=40 FX_MM_GROUP=12 FX_XQ_BYTES=16384
  _GNU_SOURCE)
target_compile_options(test_kernels_blocking PRIVATE -ffp-contract=off)
target_include_directories(test_kernels_blocking PRIVATE
  ${PROJECT_SOURCE_DIR}/lib ${PROJECT_SOURCE_DIR}/include
  ${CMAKE_CURRENT_SOURCE_DIR}/support)
find_package(Threads REQUIRED)
target_link_libraries(test_kernels_blocking PRIVATE PkgConfig::CMOCKA
  Threads::Threads ${CMAKE_DL_LIBS} m)
ferrox_warnings(test_kernels_blocking)
add_test(NAME test_kernels_blocking COMMAND test_kernels_blocking)
set_tests_properties(test_kernels_blocking PROPERTIES ENVIRONMENT
  "CMOCKA_MESSAGE_OUTPUT=stdout")
# The block types too: their activations in chunks of a few rows.
add_executable(test_qmatmul_blocking test_qmatmul.c
               ${_fx_kernel_srcs} ${PROJECT_SOURCE_DIR}/lib/core/core.c)
target_compile_definitions(test_qmatmul_blocking PRIVATE
  FX_MM_NC=3 FX_MM_MC=4 FX_MM_KC512=40 FX_MM_GROUP=12 FX_XQ_BYTES=16384
  _GNU_SOURCE
  # qdot_avx512.c: one-row groups from rows of 267 bytes on (K = 768 of
  # the K-quants), as it does past int32 gather offsets
  FX_QIDX_MAX=4000)
target_compile_options(test_qmatmul_blocking PRIVATE -ffp-contract=off)
target_include_directories(test_qmatmul_blocking PRIVATE
  ${PROJECT_SOURCE_DIR}/lib ${PROJECT_SOURCE_DIR}/include
  ${CMAKE_CURRENT_SOURCE_DIR}/support)
target_link_libraries(test_qmatmul_blocking PRIVATE PkgConfig::CMOCKA
  Threads::Threads ${CMAKE_DL_LIBS} m)
ferrox_warnings(test_qmatmul_blocking)
add_test(NAME test_qmatmul_blocking COMMAND test_qmatmul_blocking)
set_tests_properties(test_qmatmul_blocking PROPERTIES ENVIRONMENT
  "CMOCKA_MESSAGE_OUTPUT=stdout")

# No thread the host did not ask for (README): threads counted in
# /proc/self/task around a model load and batchers of 1 and 2 threads, in
# both libraries; the INTERNAL build adds a kernels context on OpenBLAS.
# OPENBLAS_NUM_THREADS=2 so that an inherited OPENBLAS_NUM_THREADS=1 cannot
# hide OpenBLAS's workers if the library ever starts them at load again.
fx_add_test(test_no_threads SOURCES test_no_threads.c LIBS ${CMAKE_DL_LIBS})
fx_add_test(test_no_threads_kernels SOURCES test_no_threads.c INTERNAL
            LIBS ${CMAKE_DL_LIBS})
target_compile_definitions(test_no_threads_kernels_static PRIVATE
  FX_TEST_NO_THREADS_KERNELS)
foreach(_fx_t test_no_threads_shared test_no_threads_static
              test_no_threads_kernels_static)
  set_tests_properties(${_fx_t} PROPERTIES ENVIRONMENT
    "CMOCKA_MESSAGE_OUTPUT=stdout;OPENBLAS_NUM_THREADS=2")
endforeach()
