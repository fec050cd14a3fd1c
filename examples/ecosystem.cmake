# Three short programs to copy from -- hello (the whole API in one page),
# chat-reuse (multi-turn chat on the prefix cache) and tool-call (prose,
# or a tool call under a lazy grammar, parsed and acted on). Like npc-demo they
# run out of the box on the demo model (batcher.cmake); a path on the
# command line replaces it.
foreach(_fx_ex hello chat-reuse tool-call)
  fx_add_example(${_fx_ex} ${_fx_ex}.c)
  target_compile_definitions(${_fx_ex} PRIVATE
    EXAMPLE_DEFAULT_MODEL="${FX_DEMO_MODEL}")
endforeach()
