# The quantization engine of ferrox-quantize (tests/support/gguf_quant.c)
# and llama-quantize's per-tensor rules (examples/quant_rules.c), built once
# for the tests that make quantized models or check the rules.
add_library(fx_test_quant STATIC ${CMAKE_CURRENT_SOURCE_DIR}/support/gguf_quant.c
            ${PROJECT_SOURCE_DIR}/examples/quant_rules.c)
target_include_directories(fx_test_quant PUBLIC ${PROJECT_SOURCE_DIR}/examples
                           ${PROJECT_SOURCE_DIR}/lib)
target_link_libraries(fx_test_quant PUBLIC ferrox_static fx_test_support)
ferrox_warnings(fx_test_quant)

fx_add_test(test_forward SOURCES test_forward.c INTERNAL)
fx_add_test(test_attention SOURCES test_attention.c INTERNAL)
# The quantization presets' per-tensor types (examples/quant_rules.c)
# against llama-quantize's.
fx_add_test(test_quantize_tool SOURCES test_quantize_tool.c INTERNAL
            LIBS fx_test_quant)
# The quantization engine of ferrox-quantize.
fx_add_test(test_quantize_run SOURCES test_quantize_run.c INTERNAL
            LIBS fx_test_quant)
fx_add_test(test_quant_load SOURCES test_quant_load.c INTERNAL)
