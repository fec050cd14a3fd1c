# Every type ferrox-quantize makes loads in ferrox and generates: for each
# TYPE (a preset, or TYPE:pure), ferrox-mkmodel writes a small model
# converted to it and ferrox-run decodes a few tokens from it.
#   cmake -DMKMODEL=path -DRUN=path -DWORK=dir -DTYPES=a|b:pure|... -P quantize_check.cmake
string(REPLACE "|" ";" TYPES "${TYPES}")
foreach(spec IN LISTS TYPES)
  string(REPLACE ":" ";" parts "${spec}")
  list(GET parts 0 type)
  set(pure)
  if(spec MATCHES ":pure$")
    set(pure --pure)
  endif()
  string(REPLACE ":" "-" file "${spec}")
  set(model ${WORK}/quantized-${file}.gguf)
  execute_process(COMMAND ${MKMODEL} --dim 256 --layers 2 --heads 4 --kv-heads 2
                          --ffn 256 --vocab 300 --type ${type} ${pure} -o ${model}
                  RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${spec}: ferrox-mkmodel failed (${rc}):\n${err}")
  endif()
  execute_process(COMMAND ${RUN} --model ${model} --prompt Once --max-tokens 4
                          --threads 2
                  RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_VARIABLE out)
  if(NOT rc EQUAL 0 OR NOT err MATCHES "finish (length|eos), [0-9]+ prompt tokens [^\n]*, [1-4] generated")
    message(FATAL_ERROR "${spec}: ferrox-run failed (${rc}):\n${err}")
  endif()
  message("${spec}: ${out}")
  file(REMOVE ${model})
endforeach()
