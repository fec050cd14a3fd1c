fx_add_test(test_gguf SOURCES test_gguf.c INTERNAL)
fx_add_test(test_model SOURCES test_model.c INTERNAL)
fx_add_test(test_api SOURCES test_api.c)
# The sized initializers against older and newer host layouts of the
# public structs (docs/abi.md).
fx_add_test(test_abi_init SOURCES test_abi_init.c)

# ferrox.h must compile alone as C99 and as C++, pedantic, warnings fatal.
add_test(NAME header_c99
  COMMAND ${CMAKE_C_COMPILER} -std=c99 -Wall -Wextra -pedantic -Werror
          -fsyntax-only -I${PROJECT_SOURCE_DIR}/include
          ${CMAKE_CURRENT_SOURCE_DIR}/header_c.c)
find_program(FX_CXX_COMPILER NAMES c++ g++ clang++)
if(FX_CXX_COMPILER)
  add_test(NAME header_cxx
    COMMAND ${FX_CXX_COMPILER} -std=c++11 -Wall -Wextra -pedantic -Werror
            -fsyntax-only -I${PROJECT_SOURCE_DIR}/include
            ${CMAKE_CURRENT_SOURCE_DIR}/header_cxx.cpp)
endif()

# Only fx_* symbols may leave the shared library.
add_test(NAME exported_symbols
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/check_exports.sh $<TARGET_FILE:ferrox>)
# And every external symbol of the static library is fx_* (it is linked
# into the host's program whole, visibility or not).
add_test(NAME static_symbols
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/check_static_exports.sh
          $<TARGET_FILE:ferrox_static> ${CMAKE_NM})

# Install to a scratch prefix and build a consumer through pkg-config and
# through find_package, as a user of the installed library would.
add_test(NAME consumer
  COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/consumer/run.sh
          ${PROJECT_BINARY_DIR} ${CMAKE_CURRENT_BINARY_DIR}/consumer-work
          ${CMAKE_CURRENT_SOURCE_DIR}/consumer ${CMAKE_C_COMPILER})
set(_fx_consumer_flags "")
if(FERROX_SANITIZE)
  set(_fx_consumer_flags "-fsanitize=address,undefined")
endif()
set_tests_properties(consumer PROPERTIES TIMEOUT 300
  ENVIRONMENT "FX_CONSUMER_FLAGS=${_fx_consumer_flags}")
