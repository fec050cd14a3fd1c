# Tokenizer: the public API (conformance against tests/data/vocab, round
# trips, special tokens, buffers, invalid UTF-8), the vocabulary loader's
# faults (RELIABILITY B), the pre-tokenizer splitters (gpt-4o's against
# llama.cpp's splits, tests/data/pretok), and the proof that
# word-by-word and block-by-block tokenizing equals whole-text tokenizing.
fx_add_test(test_tokenizer SOURCES test_tokenizer.c)
fx_add_test(test_tokenizer_faults SOURCES test_tokenizer_faults.c INTERNAL)
fx_add_test(test_tokenizer_pretok SOURCES test_tokenizer_pretok.c INTERNAL)
fx_add_test(test_tokenizer_gpt4o SOURCES test_tokenizer_gpt4o.c INTERNAL)
fx_add_test(test_tokenizer_chunks SOURCES test_tokenizer_chunks.c INTERNAL)

# Throughput and linearity; built, run by hand (not a ctest test):
#   bench_tokenizer [path/to/vocab/dir]
add_executable(bench_tokenizer bench_tokenizer.c)
target_link_libraries(bench_tokenizer PRIVATE ferrox_static fx_test_support)
ferrox_warnings(bench_tokenizer)
