# The demo model trained for ferrox (models/README.md): its perplexity on
# held-out generated dialogue equals PyTorch's evaluation of the same
# weights, within 0.5% for F16 and 2% for Q8_0. The first test of the
# forward pass on trained weights rather than random ones.
if(NOT TARGET ferrox-perplexity)
  return() # examples not built (FERROX_BUILD_EXAMPLES=OFF)
endif()
set(_fx_models ${PROJECT_SOURCE_DIR}/models)
foreach(_fx_pair f16|5 q8_0|20)
  string(REPLACE "|" ";" _fx_pair "${_fx_pair}")
  list(GET _fx_pair 0 _fx_type)
  list(GET _fx_pair 1 _fx_permille)
  add_test(NAME perplexity_npc_tiny_${_fx_type}
    COMMAND ${CMAKE_COMMAND} -DTOOL=$<TARGET_FILE:ferrox-perplexity>
            -DMODEL=${_fx_models}/npc-tiny-${_fx_type}.gguf
            -DTEXT=${_fx_models}/npc-tiny-heldout.txt
            -DREFS=${_fx_models}/npc-tiny-reference.txt -DKEY=${_fx_type}
            -DPERMILLE=${_fx_permille}
            -P ${CMAKE_CURRENT_SOURCE_DIR}/perplexity_check.cmake)
endforeach()
