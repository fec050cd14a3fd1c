fx_add_test(test_forward SOURCES test_forward.c INTERNAL)
