# Developer tools that reach into the library's internals link the static
# library with lib/ on the include path.
function(fx_add_internal_tool name)
  add_executable(${name} ${ARGN})
  target_link_libraries(${name} PRIVATE ferrox_static)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/lib
                             ${PROJECT_SOURCE_DIR}/tests/support)
  ferrox_warnings(${name})
endfunction()

fx_add_internal_tool(ferrox-mkmodel ferrox-mkmodel.c
                     ${PROJECT_SOURCE_DIR}/tests/support/gguf_writer.c)

# The benchmark drives the batcher through the public API, and for its
# roofline phase times the matmul kernels and OpenBLAS sgemm (linked through
# the static library) on the same threads.
fx_add_internal_tool(ferrox-bench ferrox-bench.c)
