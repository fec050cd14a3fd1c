# KV: block pool and budget, paged leases, the radix prefix tree.
list(APPEND FX_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/pool.c
  ${CMAKE_CURRENT_LIST_DIR}/radix.c
  ${CMAKE_CURRENT_LIST_DIR}/lease.c)
