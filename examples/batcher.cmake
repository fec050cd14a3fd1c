# npc-demo runs out of the box on a small synthetic model made here, at
# build time, with the real Llama 2 vocabulary when ../shared has it.
set(NPC_MODEL ${CMAKE_CURRENT_BINARY_DIR}/npc-model.gguf)
set(_npc_vocab --vocab 512)
if(EXISTS ${FX_SHARED_DIR}/vocab/ggml-vocab-llama-spm.gguf)
  set(_npc_vocab --vocab-from ${FX_SHARED_DIR}/vocab/ggml-vocab-llama-spm.gguf)
endif()
add_custom_command(OUTPUT ${NPC_MODEL}
  COMMAND ferrox-mkmodel --dim 256 --layers 4 --heads 8 --kv-heads 4
          --ffn 768 --ctx 2048 --tied --seed 7 ${_npc_vocab} -o ${NPC_MODEL}
  DEPENDS ferrox-mkmodel
  COMMENT "Making the synthetic model npc-demo runs on")
add_custom_target(npc-model ALL DEPENDS ${NPC_MODEL})

fx_add_example(npc-demo npc-demo.c)
target_compile_definitions(npc-demo PRIVATE NPC_DEFAULT_MODEL="${NPC_MODEL}")
add_dependencies(npc-demo npc-model)
