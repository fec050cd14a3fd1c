fx_add_test(test_sample SOURCES test_sample.c INTERNAL)
fx_add_test(test_sample_chain SOURCES test_sample_chain.c INTERNAL)
fx_add_test(test_grammar SOURCES test_grammar.c INTERNAL)
fx_add_test(test_grammar_batch SOURCES test_grammar_batch.c INTERNAL)
# Masks inside {m,n} against brute force, on two vocabularies.
fx_add_test(test_grammar_counted SOURCES test_grammar_counted.c INTERNAL)
# Lazy grammars through ferrox.h, on the byte-token model.
fx_add_test(test_grammar_lazy SOURCES test_grammar_lazy.c)

# The mask benchmark is built with the tests but not registered (its
# numbers mean something only on a quiet machine):
#   ./tests/bench_grammar [VOCAB.gguf [GRAMMAR.gbnf [TOKENS]]]
add_executable(bench_grammar bench_grammar.c)
target_link_libraries(bench_grammar PRIVATE ferrox_static fx_test_support)
target_include_directories(bench_grammar PRIVATE ${PROJECT_SOURCE_DIR}/lib)
ferrox_warnings(bench_grammar)
fx_add_test(test_json_schema SOURCES test_json_schema.c INTERNAL)
fx_add_test(test_json_schema_ranges SOURCES test_json_schema_ranges.c INTERNAL)
fx_add_test(test_json_schema_pattern SOURCES test_json_schema_pattern.c INTERNAL)
fx_add_test(test_json_schema_batch SOURCES test_json_schema_batch.c INTERNAL)
fx_add_test(test_tools_grammar SOURCES test_tools_grammar.c INTERNAL)
