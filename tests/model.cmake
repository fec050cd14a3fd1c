fx_add_test(test_forward SOURCES test_forward.c INTERNAL)
fx_add_test(test_attention SOURCES test_attention.c INTERNAL)
fx_add_test(test_quant_load SOURCES test_quant_load.c INTERNAL)
