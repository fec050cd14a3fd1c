# Runs ferrox-perplexity and compares its final PPL with the PyTorch
# reference of the same weights (models/npc-tiny-reference.txt).
#   cmake -DTOOL=path -DMODEL=m.gguf -DTEXT=t.txt -DREFS=file -DKEY=f16
#         -DPERMILLE=5 -P perplexity_check.cmake
# PERMILLE is the allowed relative difference in parts per thousand.

# "65.5244" -> 655244 (units of 1e-4); CMake's math() has integers only.
function(fx_ten_thousandths text out)
  if(NOT text MATCHES "^([0-9]+)\\.([0-9]+)$")
    message(FATAL_ERROR "'${text}' is not a decimal number")
  endif()
  set(whole "${CMAKE_MATCH_1}")
  set(frac "${CMAKE_MATCH_2}0000")
  string(SUBSTRING "${frac}" 0 4 frac)
  string(REGEX REPLACE "^0+([0-9])" "\\1" frac "${frac}")
  math(EXPR v "${whole} * 10000 + ${frac}")
  set(${out} ${v} PARENT_SCOPE)
endfunction()

file(STRINGS ${REFS} lines REGEX "^${KEY} ")
if(NOT lines MATCHES "^${KEY} ([0-9.]+)")
  message(FATAL_ERROR "no '${KEY}' line in ${REFS}")
endif()
set(ref_text ${CMAKE_MATCH_1})
execute_process(COMMAND ${TOOL} --model ${MODEL} --file ${TEXT} --parse-special
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "ferrox-perplexity exited with ${rc}:\n${err}")
endif()
if(NOT out MATCHES "Final estimate: PPL = ([0-9.]+)")
  message(FATAL_ERROR "no final estimate in:\n${out}")
endif()
set(got_text ${CMAKE_MATCH_1})
fx_ten_thousandths(${ref_text} ref)
fx_ten_thousandths(${got_text} got)
math(EXPR diff "${got} - ${ref}")
if(diff LESS 0)
  math(EXPR diff "-${diff}")
endif()
math(EXPR lhs "${diff} * 1000")
math(EXPR rhs "${ref} * ${PERMILLE}")
message("ferrox ${got_text}, PyTorch ${ref_text} (${KEY}), allowed ${PERMILLE} per mille")
if(lhs GREATER rhs)
  message(FATAL_ERROR "perplexity differs from the PyTorch reference by more than ${PERMILLE} per mille")
endif()
