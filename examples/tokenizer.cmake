# Tokenizer: print the token ids of a text, or of every case of a
# llama.cpp tokenizer test file (.inp), in the .out format.
fx_add_example(ferrox-tokenize ferrox-tokenize.c)
