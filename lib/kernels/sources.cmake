# Tensor kernels: matmul (portable, AVX2 or AVX-512 chosen at run time), per-row ops,
# number formats, the thread pool. OpenBLAS, loaded at run time, backs only
# the opt-in FX_MATMUL_FAST mode (see kernels.h).
set(_fx_kernels_sources
  ${CMAKE_CURRENT_LIST_DIR}/convert.c
  ${CMAKE_CURRENT_LIST_DIR}/cpu.c
  ${CMAKE_CURRENT_LIST_DIR}/matmul.c
  ${CMAKE_CURRENT_LIST_DIR}/matmul_avx2.c
  ${CMAKE_CURRENT_LIST_DIR}/matmul_avx512.c
  ${CMAKE_CURRENT_LIST_DIR}/matmul_portable.c
  ${CMAKE_CURRENT_LIST_DIR}/matmul_q8.c
  ${CMAKE_CURRENT_LIST_DIR}/matmul_q8_avx512.c
  ${CMAKE_CURRENT_LIST_DIR}/ops.c
  ${CMAKE_CURRENT_LIST_DIR}/qdot_avx2.c
  ${CMAKE_CURRENT_LIST_DIR}/qdot_avx2_k.c
  ${CMAKE_CURRENT_LIST_DIR}/qdot_avx2_r16.c
  ${CMAKE_CURRENT_LIST_DIR}/qdot_avx2_r16_wide.c
  ${CMAKE_CURRENT_LIST_DIR}/qdot_avx512.c
  ${CMAKE_CURRENT_LIST_DIR}/qdot_avx512_k.c
  ${CMAKE_CURRENT_LIST_DIR}/qdot_avx512_r16.c
  ${CMAKE_CURRENT_LIST_DIR}/qdot_portable.c
  ${CMAKE_CURRENT_LIST_DIR}/qr16.c
  ${CMAKE_CURRENT_LIST_DIR}/qtypes.c
  ${CMAKE_CURRENT_LIST_DIR}/quant_iq4.c
  ${CMAKE_CURRENT_LIST_DIR}/quant_legacy.c
  ${CMAKE_CURRENT_LIST_DIR}/quant_kquants.c
  ${CMAKE_CURRENT_LIST_DIR}/quant_kquants_search.c
  ${CMAKE_CURRENT_LIST_DIR}/pool.c)
list(APPEND FX_SOURCES ${_fx_kernels_sources})

# The determinism contract is written in separate roundings and explicit
# fmaf; a compiler fusing a*b+c on its own (clang's default) would change
# bits between paths.
set_property(SOURCE ${_fx_kernels_sources} APPEND PROPERTY
  COMPILE_OPTIONS -ffp-contract=off)

find_package(Threads REQUIRED)
list(APPEND FX_PRIVATE_LIBS ${CMAKE_THREAD_LIBS_INIT})
if(CMAKE_THREAD_LIBS_INIT)
  list(APPEND FX_PC_LIBS_PRIVATE ${CMAKE_THREAD_LIBS_INIT})
endif()

# OpenBLAS is not linked: matmul.c dlopens it ("libopenblas.so.0") the
# first time a context's FX_MATMUL_FAST could use it, so a host that never
# asks for the fast mode never gets OpenBLAS's thread pool (kernels.h,
# fx_fast_blas). It is a run-time dependency of the fast mode only
# (libopenblas0-pthread; libopenblas-dev also provides it); without it the
# fast mode runs the deterministic kernels. The loader needs libdl (part
# of libc since glibc 2.34; CMAKE_DL_LIBS still names it for older ones).
if(CMAKE_DL_LIBS)
  list(APPEND FX_PRIVATE_LIBS ${CMAKE_DL_LIBS})
  foreach(_fx_dl IN LISTS CMAKE_DL_LIBS)
    list(APPEND FX_PC_LIBS_PRIVATE -l${_fx_dl})
  endforeach()
endif()
