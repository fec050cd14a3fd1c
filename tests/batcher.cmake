fx_add_test(test_batcher SOURCES test_batcher.c INTERNAL)
fx_add_test(test_batcher_faults SOURCES test_batcher_faults.c INTERNAL)
