fx_add_test(test_batcher SOURCES test_batcher.c INTERNAL)
