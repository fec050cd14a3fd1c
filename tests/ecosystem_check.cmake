# Runs one example program and checks what it printed (tests/ecosystem.cmake).
#   cmake -DKIND=hello|chat|tool -DPROGRAM=path [-DARGS=a|b|c] [-DTURNS=n]
#         [-DSEEDS=n -DACTIONS=n -DPROSE=n] -P ecosystem_check.cmake
# A script rather than PASS_REGULAR_EXPRESSION because that ignores the exit
# status, and because "cached > 0 from turn 2 on" needs numbers compared.
string(REPLACE "|" ";" _args "${ARGS}")
execute_process(COMMAND ${PROGRAM} ${_args}
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
message("${out}")
if(err)
  message("stderr:\n${err}")
endif()
if(KIND STREQUAL "fails")
  # A refused run: a non-zero exit and exactly one line saying why (a
  # second, empty "row 0: ...: " line was a bug of ferrox-run --chat).
  if(rc EQUAL 0)
    message(FATAL_ERROR "${PROGRAM} succeeded; expected a failure")
  endif()
  string(REPLACE ";" "," err_plain "${err}") # ';' would split the list
  string(REGEX MATCHALL "[^\n]+" err_lines "${err_plain}")
  list(LENGTH err_lines n)
  if(NOT n EQUAL 1)
    message(FATAL_ERROR "${n} lines on stderr, expected 1")
  endif()
  if(NOT err MATCHES "${EXPECT}")
    message(FATAL_ERROR "stderr does not match '${EXPECT}'")
  endif()
  return()
endif()
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${PROGRAM} exited with ${rc}")
endif()

if(KIND STREQUAL "hello")
  # hello ends with "(T tokens, B bytes of text)": B counts what it printed.
  if(NOT out MATCHES "\n\\(([0-9]+) tokens, ([0-9]+) bytes of text\\)\n$")
    message(FATAL_ERROR "no summary line")
  endif()
  if(CMAKE_MATCH_1 EQUAL 0 OR CMAKE_MATCH_2 EQUAL 0)
    message(FATAL_ERROR "no text was generated")
  endif()
elseif(KIND STREQUAL "chat")
  string(REGEX MATCHALL "turn [0-9]+: [0-9]+ prompt tokens, [0-9]+ cached"
         lines "${out}")
  list(LENGTH lines n)
  if(NOT n EQUAL TURNS)
    message(FATAL_ERROR "${n} turns reported, expected ${TURNS}")
  endif()
  foreach(line IN LISTS lines)
    string(REGEX MATCH "turn ([0-9]+): ([0-9]+) prompt tokens, ([0-9]+) cached"
           _ "${line}")
    set(turn ${CMAKE_MATCH_1})
    set(prompt ${CMAKE_MATCH_2})
    set(cached ${CMAKE_MATCH_3})
    # Turn 1 has nothing to reuse; every later turn must adopt the
    # conversation so far, and can never adopt its whole prompt (the last
    # token is always computed, for its logits).
    if(turn EQUAL 1 AND NOT cached EQUAL 0)
      message(FATAL_ERROR "turn 1 reports ${cached} cached tokens")
    endif()
    if(turn GREATER 1 AND NOT cached GREATER 0)
      message(FATAL_ERROR "turn ${turn} reused nothing from the cache")
    endif()
    if(NOT cached LESS prompt)
      message(FATAL_ERROR "turn ${turn}: ${cached} cached of ${prompt}")
    endif()
  endforeach()
elseif(KIND STREQUAL "tool")
  # SEEDS rows, ACTIONS of them asked to act and PROSE spoken to.
  string(REGEX MATCHALL "\n  -> (give|sell|buy|open|close|heal): [^\n]+" acted "${out}")
  list(LENGTH acted n_acted)
  if(NOT out MATCHES "\n${SEEDS} of ${SEEDS} answers handled: ([0-9]+) calls parsed and acted on \\(([0-9]+) of them the action asked for\\), ([0-9]+) in prose \\(([0-9]+) where no action was asked\\)\n")
    message(FATAL_ERROR "no summary line saying all ${SEEDS} were handled")
  endif()
  set(calls ${CMAKE_MATCH_1})
  set(as_asked ${CMAKE_MATCH_2})
  set(prose_asked ${CMAKE_MATCH_4})
  if(NOT n_acted EQUAL calls)
    message(FATAL_ERROR "${n_acted} calls acted on, the summary says ${calls}")
  endif()
  # The demo model was trained to answer a request with the action asked
  # for and anything else in prose; a forward pass that drifted from its
  # training, or a grammar applied before the call starts, would not.
  math(EXPR need_actions "${ACTIONS} * 3 / 4")
  math(EXPR need_prose "${PROSE} * 3 / 4")
  if(as_asked LESS need_actions)
    message(FATAL_ERROR "only ${as_asked} of ${ACTIONS} requests got the action asked for")
  endif()
  if(prose_asked LESS need_prose)
    message(FATAL_ERROR "only ${prose_asked} of ${PROSE} lines got prose")
  endif()
else()
  message(FATAL_ERROR "unknown KIND '${KIND}'")
endif()
