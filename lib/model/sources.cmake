set(_fx_model_sources
  ${CMAKE_CURRENT_LIST_DIR}/model.c
  ${CMAKE_CURRENT_LIST_DIR}/weights.c
  ${CMAKE_CURRENT_LIST_DIR}/forward.c
  ${CMAKE_CURRENT_LIST_DIR}/attention.c)
list(APPEND FX_SOURCES ${_fx_model_sources})
# Attention's reductions are part of the determinism contract: no fused
# multiply-adds the compiler chooses on its own.
set_property(SOURCE ${_fx_model_sources} APPEND PROPERTY
  COMPILE_OPTIONS -ffp-contract=off)
