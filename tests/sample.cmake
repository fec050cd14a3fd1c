fx_add_test(test_sample SOURCES test_sample.c INTERNAL)
