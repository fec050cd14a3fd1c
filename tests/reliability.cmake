# Reliability (issue 9; docs/reliability.md, map in tests/README.md).
#
# The fault-injecting allocator every *_faults test uses lives with the
# other test support code.
target_sources(fx_test_support PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/support/fault_alloc.c)
target_include_directories(fx_test_support PUBLIC
  ${PROJECT_SOURCE_DIR}/include)

# docs/reliability.md 12: a required metadata key missing (public API).
fx_add_test(test_model_faults SOURCES test_model_faults.c)

# docs/reliability.md 43 for grammar compile, a row's parse and the trie/mask
# scratch (load: test_api; tokenize: test_tokenizer_faults; submit, step,
# poll and free: test_batcher_faults).
fx_add_test(test_grammar_faults SOURCES test_grammar_faults.c INTERNAL)

# docs/reliability.md 43 for a block-quantized model (issue 38): load,
# batcher and steps while the weights' copy is made (fx_test_quant makes
# the models).
fx_add_test(test_quant_faults SOURCES test_quant_faults.c INTERNAL
            LIBS fx_test_quant)

# docs/reliability.md 41: the long soak, 10,000 requests, in every build (about 7 s
# in the default build, 15 s under ASan + UBSan). -DFX_SOAK_REQUESTS=N on
# the target changes the count.
fx_add_test(test_soak SOURCES test_soak.c INTERNAL)

# The calls documented as thread-safe (fx_cancel; the tokenizer calls on
# one model) from several threads. .ci/run also runs it under
# ThreadSanitizer, in its own build.
find_package(Threads REQUIRED)
fx_add_test(test_threads SOURCES test_threads.c INTERNAL
            LIBS Threads::Threads fx_test_quant)

# ABI: the built shared library against the committed baseline
# tests/abi/libferrox.abi (abidiff + tests/abi/layout.py; usage and how to
# regenerate the baseline at the top of tests/abi/check.sh). Skipped (77)
# without abigail-tools or python3, or for a library built without -g.
add_test(NAME abi_check
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/abi/check.sh $<TARGET_FILE:ferrox>
          ${PROJECT_SOURCE_DIR}/include
          ${CMAKE_CURRENT_SOURCE_DIR}/abi/libferrox.abi
          ${CMAKE_CURRENT_SOURCE_DIR}/abi/suppressions)
set_tests_properties(abi_check PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120)

# Issue 36's fixes: a chain grammar deeper than a row's frames, kv_bytes
# past what the machine holds (under RLIMIT_AS), -INFINITY biases on every
# allowed token, a small grammar's small parse (INTERNAL: the grammar
# layer too); handles from another batcher, poll and lease states told
# apart (public API only).
fx_add_test(test_reliability_fixes SOURCES test_reliability_fixes.c
            reliability_batch.c INTERNAL)
fx_add_test(test_reliability_api SOURCES test_reliability_api.c
            reliability_batch.c)

# Issue 36, "finding the next ones": the contract tested from outside,
# through ferrox.h only, on a synthetic model with byte tokens
# (support/byte_model.c). test_api_statemachine: a seeded random state
# machine over the batcher API (a short run here; FX_SM_SEED / FX_SM_OPS
# for long ones, tests/README.md).
target_sources(fx_test_support PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/support/byte_model.c
  ${CMAKE_CURRENT_SOURCE_DIR}/support/text_ref.c
  ${CMAKE_CURRENT_SOURCE_DIR}/support/grammar_gen.c
  ${CMAKE_CURRENT_SOURCE_DIR}/support/mem_cap.c)
fx_add_test(test_api_statemachine SOURCES test_api_statemachine.c sm_gen.c)
# test_grammar_limits: generated grammars at every FX_GRAMMAR_* limit and
# one past it, issue 36's chain among them.
fx_add_test(test_grammar_limits SOURCES test_grammar_limits.c)
# test_resource_limits: every size a caller controls at its limit and one
# past it, each in a child under RLIMIT_AS and an alarm.
fx_add_test(test_resource_limits SOURCES test_resource_limits.c)
# test_api_findings: the regression tests of the contract breaks those
# found, a minimal reproducer each (each failed before its fix).
fx_add_test(test_api_findings SOURCES test_api_findings.c)
