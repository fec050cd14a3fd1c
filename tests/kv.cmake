# KV layer (lib/kv): reaches into lib/, so static library only.
fx_add_test(test_kv SOURCES test_kv.c INTERNAL)
fx_add_test(test_kv_soak SOURCES test_kv_soak.c INTERNAL)
fx_add_test(test_kv_forward SOURCES test_kv_forward.c INTERNAL)
fx_add_test(test_kv_ring SOURCES test_kv_ring.c INTERNAL)
