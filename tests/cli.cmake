# The command-line tools' behaviour (examples/cli.h and each tool): --help
# on stdout with status 0, bad and unknown options named on stderr with
# status 2, failures with status 1, ferrox-run's per-row report,
# ferrox-info's summary line, and progress on stderr for long work. Each
# case runs one tool through cli_check.cmake.
if(NOT TARGET ferrox-run OR NOT TARGET synthetic-model)
  return() # examples not built (FERROX_BUILD_EXAMPLES=OFF)
endif()
set(_fx_cli_check ${CMAKE_CURRENT_SOURCE_DIR}/cli_check.cmake)
set(_fx_cli_model ${PROJECT_BINARY_DIR}/examples/synthetic-model.gguf)
set(_fx_cli_work ${CMAKE_CURRENT_BINARY_DIR}/cli)
file(MAKE_DIRECTORY ${_fx_cli_work})
# Not GGUF: the message names the problem once, not twice.
file(WRITE ${_fx_cli_work}/not-gguf.txt "plain text, no GGUF magic here\n")
file(WRITE ${_fx_cli_work}/two-prompts.txt "Once upon a time\nThe dragon\n")

# fx_cli_case(NAME TOOL RC [ARGS a|b] [OUT re] [ERR re] [NOT_ERR re]
#             [SAME re SAME_ARGS a|b])
function(fx_cli_case name tool rc)
  cmake_parse_arguments(C "" "ARGS;OUT;ERR;NOT_ERR;SAME;SAME_ARGS" "" ${ARGN})
  set(defs -DPROGRAM=$<TARGET_FILE:${tool}> -DRC=${rc})
  foreach(k ARGS OUT ERR NOT_ERR SAME SAME_ARGS)
    if(DEFINED C_${k})
      list(APPEND defs "-D${k}=${C_${k}}")
    endif()
  endforeach()
  add_test(NAME cli_${name}
           COMMAND ${CMAKE_COMMAND} ${defs} -P ${_fx_cli_check}
           WORKING_DIRECTORY ${_fx_cli_work})
  set_tests_properties(cli_${name} PROPERTIES TIMEOUT 120 LABELS cli)
endfunction()

# Every tool: --help and an unknown option.
foreach(tool ferrox-run ferrox-info ferrox-tokenize ferrox-chat-template
             ferrox-mkmodel ferrox-bench ferrox-quantize ferrox-qerror)
  fx_cli_case(${tool}_help ${tool} 0 ARGS --help)
  fx_cli_case(${tool}_unknown ${tool} 2 ARGS --no-such-option
              ERR "^${tool}: unknown option --no-such-option\n")
endforeach()

# Numbers parse strictly and the message names the option.
fx_cli_case(run_temperature_text ferrox-run 2
  ARGS --model|m|--prompt|p|--temperature|xyz
  ERR "--temperature: 'xyz' is not a number")
fx_cli_case(run_max_tokens_negative ferrox-run 2
  ARGS --model|m|--prompt|p|--max-tokens|-5
  ERR "--max-tokens: '-5' is not a whole number from 1 to 4294967295")
fx_cli_case(run_max_tokens_overflow ferrox-run 2
  ARGS --model|m|--prompt|p|--max-tokens|4294967296
  ERR "--max-tokens: '4294967296' is not a whole number")
fx_cli_case(run_seed_overflow ferrox-run 2
  ARGS --model|m|--prompt|p|--seed|18446744073709551616
  ERR "--seed: '18446744073709551616' is not a whole number")
fx_cli_case(run_threads_zero ferrox-run 2
  ARGS --model|m|--prompt|p|--threads|0
  ERR "--threads: '0' is not a whole number from 1 to 256")
fx_cli_case(run_top_k_trailing ferrox-run 2
  ARGS --model|m|--prompt|p|--top-k|40x ERR "--top-k: '40x' is not")
fx_cli_case(run_top_p_range ferrox-run 2
  ARGS --model|m|--prompt|p|--top-p|1.5
  ERR "--top-p: 1.5 is out of range [(]at least 0, at most 1[)]")
fx_cli_case(run_temperature_nan ferrox-run 2
  ARGS --model|m|--prompt|p|--temperature|nan
  ERR "--temperature: 'nan' is not a number")
fx_cli_case(run_repeat_penalty_zero ferrox-run 2
  ARGS --model|m|--prompt|p|--repeat-penalty|0
  ERR "--repeat-penalty: 0 is out of range [(]more than 0")
fx_cli_case(run_missing_value ferrox-run 2
  ARGS --prompt|p|--model ERR "^ferrox-run: --model needs a value\n")
fx_cli_case(run_no_model ferrox-run 2
  ARGS --prompt|p ERR "^ferrox-run: --model is required\n")
fx_cli_case(run_missing_model_file ferrox-run 1
  ARGS --model|no-such.gguf|--prompt|p
  ERR "^ferrox-run: no-such.gguf: I/O error: cannot open")

# ferrox-run reports every row's finish reason and usage on stderr, and a
# --json answer cut by --max-tokens (one token never completes a JSON
# value) as truncated, with status 1 (the synthetic model has the Llama 2
# vocabulary, which can spell JSON).
fx_cli_case(run_report ferrox-run 0
  ARGS --model|${_fx_cli_model}|--prompt|Once|--max-tokens|4
  ERR "^ferrox-run: finish (length|eos), [0-9]+ prompt tokens [(]0 cached[)], [1-4] generated")
fx_cli_case(run_rows_report ferrox-run 0
  ARGS --model|${_fx_cli_model}|--prompts-file|two-prompts.txt|--max-tokens|3
  OUT "^row 0: [^\n]*\nrow 1: "
  ERR "^ferrox-run: row 0: finish [a-z]+, [^\n]*\nferrox-run: row 1: finish ")
fx_cli_case(run_json_truncated ferrox-run 1
  ARGS --model|${_fx_cli_model}|--prompt|Once|--max-tokens|1|--json
  ERR "finish length, [^\n]*\nferrox-run: truncated: --max-tokens 1 was reached before the grammar ended the output")

# --mapped computes from the file's mapping instead of the repacked copy:
# the same tokens.
fx_cli_case(run_mapped_same ferrox-run 0
  ARGS --model|${_fx_cli_model}|--prompt|Once|--max-tokens|12|--ids
  SAME "gen:([0-9 ]+)\n"
  SAME_ARGS --model|${_fx_cli_model}|--prompt|Once|--max-tokens|12|--ids|--mapped)

# ferrox-info: the parameter count without --check (from the tensor table)
# equals the loaded model's, a file that is not GGUF is named once.
fx_cli_case(info_params ferrox-info 0
  ARGS ${_fx_cli_model}
  OUT "architecture: llama [(]not checked[^)]*--check[^)]*[)]\n"
  SAME "params ([1-9][0-9]*)\n" SAME_ARGS ${_fx_cli_model}|--check)
fx_cli_case(info_not_gguf ferrox-info 1
  ARGS not-gguf.txt
  ERR "^ferrox-info: not-gguf.txt: not a GGUF file: magic at offset 0 is [^\n]*\n$"
  NOT_ERR "GGUF file: not a GGUF file")
fx_cli_case(info_two_files ferrox-info 2
  ARGS a.gguf|b.gguf ERR "^ferrox-info: unexpected argument 'b.gguf'\n")
fx_cli_case(info_vocab_only ferrox-info 0
  ARGS ${FX_TEST_DATA_DIR}/vocab/ggml-vocab-llama-spm.gguf
  OUT "no tensors [(]a vocabulary-only file[)]\n")

fx_cli_case(tokenize_cases_without_file ferrox-tokenize 2
  ARGS --model|m|--text|t|--cases ERR "--cases needs --file")
fx_cli_case(chat_template_no_message ferrox-chat-template 2
  ARGS --template|chatml ERR "no message")

# ferrox-mkmodel: strict numbers, and progress per tensor.
fx_cli_case(mkmodel_negative ferrox-mkmodel 2
  ARGS --dim|-3|-o|x.gguf ERR "--dim: '-3' is not a whole number")
fx_cli_case(mkmodel_type ferrox-mkmodel 2
  ARGS --type|q4|-o|x.gguf ERR "--type: 'q4' is not f32, f16, bf16, q8_0 or a type of ferrox-quantize")
fx_cli_case(mkmodel_pure_float ferrox-mkmodel 2
  ARGS --type|f16|--pure|-o|x.gguf ERR "--pure needs a quantized --type")
fx_cli_case(mkmodel_arch ferrox-mkmodel 2
  ARGS --arch|gemma|-o|x.gguf ERR "--arch: 'gemma' is not llama, qwen2, qwen3, gemma2, gemma3 or phi3")
# Qwen3: a norm per query and key head, heads (64) wider than dim / heads
# (32); quantized, it loads and generates.
fx_cli_case(mkmodel_qwen3 ferrox-mkmodel 0
  ARGS --arch|qwen3|--dim|64|--layers|1|--heads|2|--kv-heads|1|--head-dim|64|--ffn|96|--vocab|300|--type|Q4_K_M|-o|tiny-qwen3.gguf
  ERR "blk.0.attn_q_norm.weight
([^
]*
)*ferrox-mkmodel: wrote tiny-qwen3.gguf
$")
fx_cli_case(run_qwen3 ferrox-run 0
  ARGS --model|tiny-qwen3.gguf|--prompt|Once|--max-tokens|4
  ERR "^ferrox-run: finish (length|eos), [0-9]+ prompt tokens [(]0 cached[)], [1-4] generated")
set_tests_properties(cli_run_qwen3 PROPERTIES DEPENDS cli_mkmodel_qwen3)
# Gemma 3: a window of 4 positions on five layers of six, the prompt and
# the generated tokens longer than it.
fx_cli_case(mkmodel_gemma3 ferrox-mkmodel 0
  ARGS --arch|gemma3|--dim|64|--layers|6|--heads|2|--kv-heads|1|--head-dim|64|--ffn|96|--vocab|300|--swa|4|--tied|--type|q8_0|-o|tiny-gemma3.gguf
  ERR "blk.5.post_ffw_norm.weight\nferrox-mkmodel: writing tiny-gemma3.gguf")
fx_cli_case(run_gemma3 ferrox-run 0
  ARGS --model|tiny-gemma3.gguf|--prompt|Once|--max-tokens|12|--ignore-eos
  ERR "^ferrox-run: finish length, [0-9]+ prompt tokens [(]0 cached[)], 12 generated")
set_tests_properties(cli_run_gemma3 PROPERTIES DEPENDS cli_mkmodel_gemma3)
# Phi-3: fused matrices quantized as one, a window, LongRoPE.
fx_cli_case(mkmodel_phi3 ferrox-mkmodel 0
  ARGS --arch|phi3|--dim|256|--layers|2|--heads|4|--kv-heads|2|--ffn|256|--vocab|300|--swa|6|--longrope|32|--type|Q4_K_M|-o|tiny-phi3.gguf
  ERR "blk.1.attn_qkv.weight\n([^\n]*\n)*ferrox-mkmodel: wrote tiny-phi3.gguf\n$")
fx_cli_case(run_phi3 ferrox-run 0
  ARGS --model|tiny-phi3.gguf|--prompt|Once|--max-tokens|12|--ignore-eos
  ERR "^ferrox-run: finish length, [0-9]+ prompt tokens [(]0 cached[)], 12 generated")
set_tests_properties(cli_run_phi3 PROPERTIES DEPENDS cli_mkmodel_phi3)
# A preset: generated in f32, then converted as ferrox-quantize does.
fx_cli_case(mkmodel_preset ferrox-mkmodel 0
  ARGS --dim|64|--layers|1|--heads|2|--ffn|96|--vocab|300|--type|q4_0|-o|tiny-q4_0.gguf
  ERR "ferrox-mkmodel: converting to Q4_0, writing tiny-q4_0.gguf\nferrox-mkmodel: wrote tiny-q4_0.gguf\n$")
# Rows of 96 are not whole blocks of 256: llama-quantize would fail too.
fx_cli_case(mkmodel_preset_pure_rows ferrox-mkmodel 1
  ARGS --dim|64|--layers|1|--heads|2|--ffn|96|--vocab|300|--type|q4_k|--pure|-o|tiny-q4k.gguf
  ERR "ferrox-mkmodel: output.weight: rows of 64 elements are not whole blocks of q4_K [(]256 elements[)]\n$")

# ferrox-quantize: each tensor's conversion on stderr, the tied embedding
# as the output matrix (q6_K); then what it refuses. ferrox-qerror
# compares the result with its source.
fx_cli_case(quantize_progress ferrox-quantize 0
  ARGS ${_fx_cli_model}|synthetic-q4km.gguf|q4_k_m|--threads|2
  ERR "^ferrox-quantize: [^\n]* -> synthetic-q4km.gguf as Q4_K_M, 2 threads\nferrox-quantize: [[]1/38[]] output_norm.weight [(]256[)] f32 -> f32\nferrox-quantize: [[]2/38[]] token_embd.weight [(]256 x 32000[)] f32 -> q6_K\n([^\n]*\n)*ferrox-quantize: [[]38/38[]] blk.3.ffn_up.weight [(]256 x 768[)] f32 -> q4_K\nferrox-quantize: wrote synthetic-q4km.gguf: 29 tensors converted [(]0 fallback[)], [0-9.]+ MiB -> [0-9.]+ MiB\n$")
fx_cli_case(quantize_requantize ferrox-quantize 1
  ARGS synthetic-q4km.gguf|again.gguf|Q8_0
  ERR "ferrox-quantize: synthetic-q4km.gguf: token_embd.weight is q6_k: only f32, f16 and bf16 weights are converted\n$")
fx_cli_case(qerror_synthetic ferrox-qerror 0
  ARGS ${_fx_cli_model}|synthetic-q4km.gguf
  OUT "^tensor [^\n]*\ntoken_embd.weight +f32 +q6_K [^\n]*\n([^\n]*\n)*mean rel 0[.]0[0-9]+ over 29 tensors; whole model rel 0[.]0[0-9]+\n$")
set_tests_properties(cli_quantize_requantize cli_qerror_synthetic PROPERTIES
                     DEPENDS cli_quantize_progress)
fx_cli_case(qerror_itself ferrox-qerror 0
  ARGS ${_fx_cli_model}|${_fx_cli_model}
  OUT "\nmean rel 0[.]000000 over 29 tensors; whole model rel 0[.]000000\n$")
fx_cli_case(qerror_other_shape ferrox-qerror 1
  ARGS ${_fx_cli_model}|tiny.gguf
  ERR "^ferrox-qerror: token_embd.weight has another shape in tiny.gguf\n$")
set_tests_properties(cli_qerror_other_shape PROPERTIES DEPENDS cli_mkmodel_progress)
fx_cli_case(qerror_no_common ferrox-qerror 1
  ARGS ${_fx_cli_model}|${FX_TEST_DATA_DIR}/vocab/ggml-vocab-llama-spm.gguf
  ERR "^ferrox-qerror: no weight matrix of [^\n]* is in [^\n]*ggml-vocab-llama-spm.gguf\n$")
# The converted model loads and generates.
fx_cli_case(run_quantized ferrox-run 0
  ARGS --model|synthetic-q4km.gguf|--prompt|Once|--max-tokens|4
  ERR "^ferrox-run: finish (length|eos), [0-9]+ prompt tokens [(]0 cached[)], [1-4] generated")
set_tests_properties(cli_run_quantized PROPERTIES DEPENDS cli_quantize_progress)
# So does every type and preset, in a model of its own (quantize_check.cmake).
add_test(NAME cli_quantized_models_run
  COMMAND ${CMAKE_COMMAND} -DMKMODEL=$<TARGET_FILE:ferrox-mkmodel>
          -DRUN=$<TARGET_FILE:ferrox-run> -DWORK=${_fx_cli_work}
          "-DTYPES=f16|bf16|q8_0|q4_0|q4_1|q5_0|q5_1|Q2_K|Q3_K_S|Q3_K_M|Q3_K_L|Q4_K_S|Q4_K_M|Q5_K_S|Q5_K_M|Q6_K|IQ4_NL|IQ4_XS|q2_k:pure|q3_k:pure|q4_k:pure|q5_k:pure|q6_k:pure|iq4_xs:pure|iq4_nl:pure|q4_1:pure|q5_0:pure|q5_1:pure"
          -P ${CMAKE_CURRENT_SOURCE_DIR}/quantize_check.cmake)
set_tests_properties(cli_quantized_models_run PROPERTIES TIMEOUT 300 LABELS cli)
fx_cli_case(quantize_missing_file ferrox-quantize 1
  ARGS no-such.gguf|out.gguf|Q4_K_M
  ERR "^ferrox-quantize: no-such.gguf: I/O error: cannot open")
fx_cli_case(quantize_unknown_type ferrox-quantize 2
  ARGS a.gguf|b.gguf|Q9_K ERR "TYPE: 'Q9_K' is not a type ferrox-quantize makes")
fx_cli_case(quantize_missing_type ferrox-quantize 2
  ARGS a.gguf|b.gguf ERR "IN.gguf, OUT.gguf and TYPE are required")
fx_cli_case(quantize_threads ferrox-quantize 2
  ARGS a.gguf|b.gguf|Q4_0|--threads|0 ERR "--threads: '0' is not a whole number from 1 to 256")
fx_cli_case(quantize_no_dir ferrox-quantize 1
  ARGS ${_fx_cli_model}|no-such-dir/out.gguf|Q4_0
  ERR "^ferrox-quantize: no-such-dir/out.gguf: cannot create a file next to it: ")
fx_cli_case(quantize_not_gguf ferrox-quantize 1
  ARGS not-gguf.txt|out.gguf|Q4_0 ERR "^ferrox-quantize: not-gguf.txt: not a GGUF file")
fx_cli_case(qerror_missing_file ferrox-qerror 1
  ARGS no-such.gguf|b.gguf ERR "^ferrox-qerror: no-such.gguf: I/O error: cannot open")
fx_cli_case(mkmodel_progress ferrox-mkmodel 0
  ARGS --dim|64|--layers|1|--heads|2|--ffn|96|--vocab|300|-o|tiny.gguf
  ERR "generating f32 weights: 1 layers[^\n]*\nferrox-mkmodel: [[]1/12[]] token_embd.weight\n([^\n]*\n)*ferrox-mkmodel: [[]12/12[]] blk.0.ffn_down.weight\nferrox-mkmodel: writing tiny.gguf [(][0-9]+ bytes[)]\nferrox-mkmodel: wrote tiny.gguf\n$")

# ferrox-bench: lists parse strictly, and a short run on the synthetic
# model (a few tokens per phase, no roofline, bandwidth given so no probe)
# says each phase on stderr before it starts.
fx_cli_case(bench_rows ferrox-bench 2
  ARGS --model|m|--rows|1,x ERR "--rows: '1,x' is not a list")
fx_cli_case(bench_phases ferrox-bench 2
  ARGS --model|m|--phases|prefill,foo ERR "--phases: 'prefill,foo' is not a list")
fx_cli_case(bench_progress ferrox-bench 0
  ARGS --model|${_fx_cli_model}|--phases|prefill,decode,ttft|--repeats|1|--prompt-tokens|8|--gen-tokens|2|--prefix-tokens|16|--step-tokens|16|--bandwidth-gbps|10|--peak-gflops|10
  OUT "\"phase\":\"prefill\"[^\n]*\n[^\n]*\"phase\":\"decode\"[^\n]*\n[^\n]*\"phase\":\"ttft_cold\""
  ERR "loading [^\n]*\nferrox-bench: warming up[^\n]*\nferrox-bench: prefill: 8 prompt tokens, 1 repeats\nferrox-bench: decode: 1 rows, 2 tokens each, 1 repeats\nferrox-bench: ttft: [^\n]*\nferrox-bench: done\n$")
