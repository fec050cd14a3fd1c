# The demo model trained for ferrox (models/README.md): npc-demo and the
# short examples (ecosystem.cmake) run on it when given no --model.
set(FX_DEMO_MODEL ${PROJECT_SOURCE_DIR}/models/npc-tiny-f16.gguf)

# A synthetic model with random weights and the real Llama 2 vocabulary
# (tests/data), made at build time: the binding tests and the checks that
# need a model without a chat template run on it.
set(FX_SYNTHETIC_MODEL ${CMAKE_CURRENT_BINARY_DIR}/synthetic-model.gguf)
add_custom_command(OUTPUT ${FX_SYNTHETIC_MODEL}
  COMMAND ferrox-mkmodel --dim 256 --layers 4 --heads 8 --kv-heads 4
          --ffn 768 --ctx 2048 --tied --seed 7
          --vocab-from ${FX_TEST_DATA_DIR}/vocab/ggml-vocab-llama-spm.gguf
          -o ${FX_SYNTHETIC_MODEL}
  DEPENDS ferrox-mkmodel
  COMMENT "Making the synthetic model the binding tests run on")
add_custom_target(synthetic-model ALL DEPENDS ${FX_SYNTHETIC_MODEL})

fx_add_example(npc-demo npc-demo.c)
target_compile_definitions(npc-demo PRIVATE NPC_DEFAULT_MODEL="${FX_DEMO_MODEL}")
