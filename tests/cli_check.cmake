# Runs one command-line tool and checks its exit status and output
# (tests/cli.cmake registers the cases).
#   cmake -DPROGRAM=path [-DARGS=a|b|c] -DRC=n [-DOUT=regex] [-DERR=regex]
#         [-DNOT_ERR=regex] [-DSAME=regex -DSAME_ARGS=a|b] -P cli_check.cmake
# OUT/ERR must match stdout/stderr; NOT_ERR must not match stderr. SAME:
# the program is run again with SAME_ARGS, and the regex's first group must
# capture the same text from both runs' stdout.
# Beyond that, every case checks the conventions all tools share: --help
# (RC 0) writes nothing to stderr, and a usage error (RC 2) writes nothing
# to stdout and points to --help.
string(REPLACE "|" ";" _args "${ARGS}")
execute_process(COMMAND ${PROGRAM} ${_args}
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
message("exit status ${rc}\nstdout:\n${out}\nstderr:\n${err}")

if(NOT rc STREQUAL "${RC}")
  message(FATAL_ERROR "exit status ${rc}, expected ${RC}")
endif()
if(DEFINED OUT AND NOT out MATCHES "${OUT}")
  message(FATAL_ERROR "stdout does not match '${OUT}'")
endif()
if(DEFINED ERR AND NOT err MATCHES "${ERR}")
  message(FATAL_ERROR "stderr does not match '${ERR}'")
endif()
if(DEFINED NOT_ERR AND err MATCHES "${NOT_ERR}")
  message(FATAL_ERROR "stderr matches '${NOT_ERR}'")
endif()
if(RC EQUAL 2)
  if(NOT out STREQUAL "")
    message(FATAL_ERROR "a usage error wrote to stdout")
  endif()
  if(NOT err MATCHES "Try '[^ ]+ --help' for the options\\.\n$")
    message(FATAL_ERROR "a usage error does not point to --help")
  endif()
endif()
if(ARGS MATCHES "(^|\\|)--help(\\||$)" AND RC EQUAL 0)
  if(NOT err STREQUAL "")
    message(FATAL_ERROR "--help wrote to stderr")
  endif()
  if(NOT out MATCHES "^usage: ")
    message(FATAL_ERROR "--help does not start with 'usage: '")
  endif()
endif()

if(DEFINED SAME)
  if(NOT out MATCHES "${SAME}")
    message(FATAL_ERROR "stdout does not match '${SAME}'")
  endif()
  set(first "${CMAKE_MATCH_1}")
  string(REPLACE "|" ";" _args "${SAME_ARGS}")
  execute_process(COMMAND ${PROGRAM} ${_args}
                  OUTPUT_VARIABLE out2 RESULT_VARIABLE rc2)
  if(NOT rc2 EQUAL 0 OR NOT out2 MATCHES "${SAME}")
    message(FATAL_ERROR "the run with ${SAME_ARGS} (exit ${rc2}) does not "
                        "match '${SAME}':\n${out2}")
  endif()
  if(NOT first STREQUAL CMAKE_MATCH_1)
    message(FATAL_ERROR "'${first}' here, '${CMAKE_MATCH_1}' with ${SAME_ARGS}")
  endif()
endif()
