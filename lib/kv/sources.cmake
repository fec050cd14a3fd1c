# KV: block pool and budget, paged leases, the radix prefix tree, the
# sliding layers' rings.
list(APPEND FX_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/pool.c
  ${CMAKE_CURRENT_LIST_DIR}/radix.c
  ${CMAKE_CURRENT_LIST_DIR}/lease.c
  ${CMAKE_CURRENT_LIST_DIR}/ring.c)
