fx_add_test(test_forward SOURCES test_forward.c INTERNAL)
fx_add_test(test_attention SOURCES test_attention.c INTERNAL)
# The quantization presets' per-tensor types (examples/quant_rules.c)
# against llama-quantize's.
fx_add_test(test_quantize_tool SOURCES test_quantize_tool.c
            ${PROJECT_SOURCE_DIR}/examples/quant_rules.c INTERNAL)
target_include_directories(test_quantize_tool_static PRIVATE
                           ${PROJECT_SOURCE_DIR}/examples)
