fx_add_test(test_text SOURCES test_text.c INTERNAL)
fx_add_test(test_text_random SOURCES test_text_random.c INTERNAL)
