# Tensor kernels: matmul (portable, AVX2 or AVX-512 chosen at run time), per-row ops,
# number formats, the thread pool. OpenBLAS backs only the opt-in
# FX_MATMUL_FAST mode (see kernels.h).
set(_fx_kernels_sources
  ${CMAKE_CURRENT_LIST_DIR}/convert.c
  ${CMAKE_CURRENT_LIST_DIR}/cpu.c
  ${CMAKE_CURRENT_LIST_DIR}/matmul.c
  ${CMAKE_CURRENT_LIST_DIR}/matmul_avx2.c
  ${CMAKE_CURRENT_LIST_DIR}/matmul_avx512.c
  ${CMAKE_CURRENT_LIST_DIR}/matmul_q8.c
  ${CMAKE_CURRENT_LIST_DIR}/matmul_q8_avx512.c
  ${CMAKE_CURRENT_LIST_DIR}/ops.c
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

# OpenBLAS: through pkg-config where it has a .pc (Debian puts the headers
# in a flavour directory), else find_library/find_path.
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(FX_OPENBLAS QUIET openblas)
endif()
if(FX_OPENBLAS_FOUND)
  set(_fx_openblas_libs ${FX_OPENBLAS_LINK_LIBRARIES})
  set(_fx_openblas_incs ${FX_OPENBLAS_INCLUDE_DIRS})
  list(APPEND FX_PC_REQUIRES_PRIVATE openblas)
else()
  find_library(FX_OPENBLAS_LIBRARY openblas REQUIRED)
  find_path(FX_CBLAS_INCLUDE_DIR cblas.h
            PATH_SUFFIXES openblas openblas-pthread REQUIRED)
  set(_fx_openblas_libs ${FX_OPENBLAS_LIBRARY})
  set(_fx_openblas_incs ${FX_CBLAS_INCLUDE_DIR})
  list(APPEND FX_PC_LIBS_PRIVATE -lopenblas)
endif()
list(APPEND FX_PRIVATE_LIBS ${_fx_openblas_libs})
# Only matmul.c includes cblas.h; keep the include path to it.
if(_fx_openblas_incs)
  set_property(SOURCE ${CMAKE_CURRENT_LIST_DIR}/matmul.c APPEND PROPERTY
    INCLUDE_DIRECTORIES ${_fx_openblas_incs})
endif()
