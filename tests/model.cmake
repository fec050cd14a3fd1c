fx_add_test(test_forward SOURCES test_forward.c INTERNAL)
fx_add_test(test_attention SOURCES test_attention.c INTERNAL)
# The quantization presets' per-tensor types (examples/quant_rules.c)
# against llama-quantize's.
fx_add_test(test_quantize_tool SOURCES test_quantize_tool.c
            ${PROJECT_SOURCE_DIR}/examples/quant_rules.c INTERNAL)
target_include_directories(test_quantize_tool_static PRIVATE
                           ${PROJECT_SOURCE_DIR}/examples)
# The quantization engine of ferrox-quantize (tests/support/gguf_quant.c).
fx_add_test(test_quantize_run SOURCES test_quantize_run.c
            ${CMAKE_CURRENT_SOURCE_DIR}/support/gguf_quant.c
            ${PROJECT_SOURCE_DIR}/examples/quant_rules.c INTERNAL)
target_include_directories(test_quantize_run_static PRIVATE
                           ${PROJECT_SOURCE_DIR}/examples)
fx_add_test(test_quant_load SOURCES test_quant_load.c INTERNAL)
