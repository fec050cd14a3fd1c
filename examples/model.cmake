# Developer tools that reach into the library's internals link the static
# library with lib/ on the include path.
function(fx_add_internal_tool name)
  add_executable(${name} ${ARGN})
  target_link_libraries(${name} PRIVATE ferrox_static)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/lib
                             ${PROJECT_SOURCE_DIR}/tests/support
                             ${PROJECT_SOURCE_DIR}/examples)
  ferrox_warnings(${name})
endfunction()

# The quantization engine (gguf_quant.c) and llama-quantize's per-tensor
# rules (quant_rules.c), shared by ferrox-quantize and ferrox-mkmodel.
set(FX_QUANT_TOOL_SOURCES quant_rules.c
    ${PROJECT_SOURCE_DIR}/tests/support/gguf_quant.c
    ${PROJECT_SOURCE_DIR}/tests/support/gguf_writer.c)
fx_add_internal_tool(ferrox-mkmodel ferrox-mkmodel.c ${FX_QUANT_TOOL_SOURCES})
fx_add_internal_tool(ferrox-quantize ferrox-quantize.c ${FX_QUANT_TOOL_SOURCES})
# Per-tensor error of a quantized model against its F32 source.
fx_add_internal_tool(ferrox-qerror ferrox-qerror.c quant_rules.c)

# The benchmark drives the batcher through the public API, and for its
# roofline phase times the matmul kernels and OpenBLAS sgemm on the same
# threads. It sets OpenBLAS's thread count and reports its kernels, so it
# links OpenBLAS itself (the library only loads it, for the fast mode).
fx_add_internal_tool(ferrox-bench ferrox-bench.c bench_roofline.c)
find_package(PkgConfig QUIET)
pkg_check_modules(FX_BENCH_OPENBLAS QUIET openblas)
if(FX_BENCH_OPENBLAS_FOUND)
  target_link_libraries(ferrox-bench PRIVATE ${FX_BENCH_OPENBLAS_LINK_LIBRARIES})
else()
  find_library(FX_BENCH_OPENBLAS_LIBRARY openblas REQUIRED)
  target_link_libraries(ferrox-bench PRIVATE ${FX_BENCH_OPENBLAS_LIBRARY})
endif()

# Perplexity over a text file, as llama.cpp's llama-perplexity measures it;
# it needs a prompt's logits, which the public API does not return.
fx_add_internal_tool(ferrox-perplexity ferrox-perplexity.c)
