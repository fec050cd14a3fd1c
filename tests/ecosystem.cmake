# The example programs run on the demo model (models/npc-tiny-f16.gguf,
# compiled into each as its default) and their output is checked by
# ecosystem_check.cmake:
#   example_hello      exits 0 and generated at least one token of text;
#   example_chat_reuse four scripted turns, each re-rendering the whole
#                      conversation: turn 1 has no cached tokens, every later
#                      turn reuses some (and never its whole prompt);
#   example_tool_call  8 seeds, 8 rows side by side: every answer parsed as
#                      an NPC action and the game acted on it, and at least
#                      6 of them the action the player asked for;
#   example_run_chat_no_template  ferrox-run refuses, with one message
#                      (on the synthetic model, which has no template).
if(NOT TARGET hello)
  return() # examples not built (FERROX_BUILD_EXAMPLES=OFF)
endif()
set(_fx_check ${CMAKE_CURRENT_SOURCE_DIR}/ecosystem_check.cmake)

add_test(NAME example_hello
  COMMAND ${CMAKE_COMMAND} -DKIND=hello -DPROGRAM=$<TARGET_FILE:hello>
          -P ${_fx_check})
add_test(NAME example_chat_reuse
  COMMAND ${CMAKE_COMMAND} -DKIND=chat -DPROGRAM=$<TARGET_FILE:chat-reuse>
          -DTURNS=4 -P ${_fx_check})
add_test(NAME example_tool_call
  COMMAND ${CMAKE_COMMAND} -DKIND=tool -DPROGRAM=$<TARGET_FILE:tool-call>
          -DARGS=--seeds|12 -DSEEDS=12 -DACTIONS=8 -DPROSE=4 -P ${_fx_check})
# ferrox-run --chat on a model without a chat template: refused, with one
# message naming the cause.
add_test(NAME example_run_chat_no_template
  COMMAND ${CMAKE_COMMAND} -DKIND=fails -DPROGRAM=$<TARGET_FILE:ferrox-run>
          -DARGS=--model|${PROJECT_BINARY_DIR}/examples/synthetic-model.gguf|--chat|--prompt|hi
          -DEXPECT=no.tokenizer.chat_template -P ${_fx_check})
set_tests_properties(example_hello example_chat_reuse example_tool_call
  example_run_chat_no_template PROPERTIES TIMEOUT 120)
