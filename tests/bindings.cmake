# The Python, Go and Rust bindings (bindings/*), each tested by its own
# language's runner against the shared library built here and the
# synthetic model (examples/batcher.cmake): binding_python,
# binding_go, binding_rust. A missing toolchain registers the test as
# skipped, with the reason in its output, instead of failing the suite.

# Not under the sanitizers: an ASan-instrumented libferrox.so loaded into
# python, a cgo test binary or a cargo test binary needs the ASan runtime
# preloaded (LD_PRELOAD) and interceptors those runtimes fight with. The C
# suite covers the library under the sanitizers; these tests cover the
# bindings.
if(FERROX_SANITIZE)
  return()
endif()

set(_fx_bind_src ${PROJECT_SOURCE_DIR}/bindings)
set(_fx_bind_work ${CMAKE_CURRENT_BINARY_DIR}/bindings)
set(_fx_bind_model ${CMAKE_BINARY_DIR}/examples/synthetic-model.gguf)
set(_fx_bind_libdir $<TARGET_FILE_DIR:ferrox>)

function(fx_binding_skip name why)
  add_test(NAME ${name} COMMAND ${CMAKE_COMMAND} -E echo "SKIPPED: ${why}")
  set_tests_properties(${name} PROPERTIES
    SKIP_REGULAR_EXPRESSION "SKIPPED: " LABELS bindings)
endfunction()

function(fx_binding_test name workdir)
  add_test(NAME ${name} COMMAND ${CMAKE_COMMAND} -E env ${ARGN}
           WORKING_DIRECTORY ${workdir})
  # The first run of Go and Rust compiles their test binaries from cold
  # caches; later runs take seconds.
  set_tests_properties(${name} PROPERTIES TIMEOUT 300 LABELS bindings)
endfunction()

# The tests check real text (tokenizer round trips, stop strings, a
# grammar of English words) on the synthetic model with the Llama 2
# vocabulary (examples/batcher.cmake).
set(_fx_bind_why "")
if(NOT TARGET synthetic-model)
  set(_fx_bind_why "needs the synthetic-model target (FERROX_BUILD_EXAMPLES=ON)")
endif()

# ---- Python: ctypes, standard library only ----
find_package(Python3 3.8 COMPONENTS Interpreter)
if(_fx_bind_why)
  fx_binding_skip(binding_python "${_fx_bind_why}")
elseif(NOT Python3_Interpreter_FOUND)
  fx_binding_skip(binding_python "no Python 3.8+ interpreter found at configure time")
else()
  fx_binding_test(binding_python ${_fx_bind_src}/python
    FERROX_LIBRARY=$<TARGET_FILE:ferrox>
    FERROX_TEST_MODEL=${_fx_bind_model}
    # No __pycache__ in the source tree.
    PYTHONDONTWRITEBYTECODE=1
    # -W error: the project's warnings-are-errors rule, for Python's
    # warnings (deprecations, unclosed resources).
    ${Python3_EXECUTABLE} -W error -m unittest discover -v -s tests)
endif()

# ---- Go: cgo ----
find_program(FX_GO_EXECUTABLE go)
set(_fx_go_why "${_fx_bind_why}")
if(NOT _fx_go_why)
  if(NOT FX_GO_EXECUTABLE)
    set(_fx_go_why "no go toolchain found at configure time (Debian: golang-go)")
  else()
    execute_process(COMMAND ${FX_GO_EXECUTABLE} env GOVERSION
                    OUTPUT_VARIABLE _fx_go_version
                    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    string(REGEX REPLACE "^go([0-9]+\\.[0-9]+).*" "\\1" _fx_go_version
           "${_fx_go_version}")
    if(NOT _fx_go_version MATCHES "^[0-9]+\\.[0-9]+$"
       OR _fx_go_version VERSION_LESS 1.19)
      set(_fx_go_why "go ${_fx_go_version} found; bindings/go needs 1.19+")
    endif()
  endif()
endif()
if(_fx_go_why)
  fx_binding_skip(binding_go "${_fx_go_why}")
else()
  # Everything Go writes goes under the build tree (HOME may be unset in
  # CI), nothing is fetched (go.mod has no requirements), and the test
  # result cache is bypassed because it cannot see libferrox.so change.
  # The cgo preamble is our C code, so it gets the project's -Werror.
  fx_binding_test(binding_go ${_fx_bind_src}/go
    --unset=GOFLAGS
    GOCACHE=${_fx_bind_work}/go-cache
    GOPATH=${_fx_bind_work}/go-path
    GOPROXY=off GO111MODULE=on CGO_ENABLED=1
    CC=${CMAKE_C_COMPILER}
    "CGO_CFLAGS=-I${PROJECT_SOURCE_DIR}/include -O2 -Wall -Werror"
    CGO_LDFLAGS=-L${_fx_bind_libdir}
    LD_LIBRARY_PATH=${_fx_bind_libdir}
    FERROX_TEST_MODEL=${_fx_bind_model}
    ${FX_GO_EXECUTABLE} test -count=1 -v ./...)
endif()

# ---- Rust: std only, hand-written extern "C" ----
find_program(FX_CARGO_EXECUTABLE cargo HINTS $ENV{HOME}/.cargo/bin /root/.cargo/bin)
if(_fx_bind_why)
  fx_binding_skip(binding_rust "${_fx_bind_why}")
elseif(NOT FX_CARGO_EXECUTABLE)
  fx_binding_skip(binding_rust "no cargo found at configure time (Debian: cargo)")
else()
  # --locked: the committed Cargo.lock (format 3, readable by Debian's
  # cargo) is used as is and never rewritten in the source tree.
  fx_binding_test(binding_rust ${_fx_bind_src}/rust
    CARGO_TARGET_DIR=${_fx_bind_work}/cargo-target
    FERROX_LIB_DIR=${_fx_bind_libdir}
    LD_LIBRARY_PATH=${_fx_bind_libdir}
    FERROX_TEST_MODEL=${_fx_bind_model}
    "RUSTFLAGS=-D warnings"
    ${FX_CARGO_EXECUTABLE} test --offline --locked)
endif()
