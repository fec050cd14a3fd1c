# Tensor kernels (lib/kernels): reach into lib/, so static library only.
fx_add_test(test_kernels_matmul SOURCES test_kernels_matmul.c INTERNAL)
fx_add_test(test_kernels_ops SOURCES test_kernels_ops.c INTERNAL)

# The benchmark is built with the tests but not registered: its numbers
# mean something only on a quiet machine, run by hand:
#   ./tests/bench_kernels [--quick]
add_executable(bench_kernels bench_kernels.c)
target_link_libraries(bench_kernels PRIVATE ferrox_static)
target_include_directories(bench_kernels PRIVATE ${PROJECT_SOURCE_DIR}/lib)
ferrox_warnings(bench_kernels)

# Blocking must not change a single bit (kernels.h): the matmul tests again,
# against the kernels compiled with tiny blocks (a 3-column panel, 4-row
# block, 32-wide K slab, a 16 KiB Q8_0 activation buffer that takes a
# dozen rows at a time), so every block, slab, chunk and task edge is
# crossed many times even by small shapes.
set(_fx_kernel_srcs convert.c cpu.c matmul.c matmul_avx2.c matmul_avx512.c
  matmul_q8.c matmul_q8_avx512.c ops.c pool.c)
list(TRANSFORM _fx_kernel_srcs PREPEND ${PROJECT_SOURCE_DIR}/lib/kernels/)
find_package(PkgConfig QUIET)
pkg_check_modules(FX_TEST_OPENBLAS QUIET openblas)
if(FX_TEST_OPENBLAS_FOUND)
  add_executable(test_kernels_blocking test_kernels_matmul.c
                 ${_fx_kernel_srcs} ${PROJECT_SOURCE_DIR}/lib/core/core.c)
  target_compile_definitions(test_kernels_blocking PRIVATE
    FX_MM_NC=3 FX_MM_MC=4 FX_MM_KC=32 FX_XQ_BYTES=16384 _GNU_SOURCE)
  target_compile_options(test_kernels_blocking PRIVATE -ffp-contract=off)
  target_include_directories(test_kernels_blocking PRIVATE
    ${PROJECT_SOURCE_DIR}/lib ${PROJECT_SOURCE_DIR}/include
    ${FX_TEST_OPENBLAS_INCLUDE_DIRS})
  find_package(Threads REQUIRED)
  target_link_libraries(test_kernels_blocking PRIVATE PkgConfig::CMOCKA
    ${FX_TEST_OPENBLAS_LINK_LIBRARIES} Threads::Threads m)
  ferrox_warnings(test_kernels_blocking)
  add_test(NAME test_kernels_blocking COMMAND test_kernels_blocking)
  set_tests_properties(test_kernels_blocking PROPERTIES ENVIRONMENT
    "CMOCKA_MESSAGE_OUTPUT=stdout")
endif()
