# The Python, Go and Rust bindings (bindings/*), each tested by its own
# language's runner against the library built here and the synthetic
# model (examples/batcher.cmake). Each is also built the way its
# ecosystem installs it: Python by pip from pyproject.toml, Go and Rust
# through pkg-config against this build installed under the build tree
# (binding_install, `cmake --install --prefix`), Rust also statically and
# through its FERROX_LIB_DIR fallback. A missing toolchain registers the
# test as skipped, with the reason in its output, instead of failing the
# suite.

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
# Published chat templates and what jinja2 renders for them, for the
# tests of fx_chat_apply_ex (the pip test runs a copy of its suite, which
# cannot find them relative to itself).
set(_fx_bind_chat_data ${PROJECT_SOURCE_DIR}/tests/data/chat)
set(_fx_bind_libdir $<TARGET_FILE_DIR:ferrox>)
set(_fx_bind_prefix ${_fx_bind_work}/prefix)
set(_fx_bind_pc_path ${_fx_bind_prefix}/${CMAKE_INSTALL_LIBDIR}/pkgconfig)

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

# What pkg-config users build against: this build installed, with its
# ferrox.pc, under the build tree. A fixture, so the tests that use it run
# after it.
add_test(NAME binding_install
         COMMAND ${CMAKE_COMMAND} --install ${CMAKE_BINARY_DIR}
                 --prefix ${_fx_bind_prefix})
set_tests_properties(binding_install PROPERTIES
  FIXTURES_SETUP fx_bind_prefix LABELS bindings)

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
    FERROX_TEST_CHAT_DATA=${_fx_bind_chat_data}
    # No __pycache__ in the source tree.
    PYTHONDONTWRITEBYTECODE=1
    # -W error: the project's warnings-are-errors rule, for Python's
    # warnings (deprecations, unclosed resources).
    ${Python3_EXECUTABLE} -W error -m unittest discover -v -s tests)
endif()

# pip install of pyproject.toml without PyPI (--no-build-isolation) needs an
# interpreter that has setuptools 61+ (pyproject metadata) and wheel.
set(_fx_pip_python "")
if(NOT _fx_bind_why)
  foreach(_py ${Python3_EXECUTABLE} /usr/bin/python3)
    if(NOT _fx_pip_python AND EXISTS ${_py})
      execute_process(COMMAND ${_py} -c
        "import setuptools as s, wheel, pip; assert int(s.__version__.split('.')[0]) >= 61"
        RESULT_VARIABLE _fx_rc OUTPUT_QUIET ERROR_QUIET)
      if(_fx_rc EQUAL 0)
        set(_fx_pip_python ${_py})
      endif()
    endif()
  endforeach()
endif()
if(_fx_bind_why)
  fx_binding_skip(binding_python_pip "${_fx_bind_why}")
elseif(NOT _fx_pip_python)
  fx_binding_skip(binding_python_pip "no python3 with pip, wheel and setuptools 61+ (Debian: python3-pip python3-wheel python3-setuptools)")
else()
  fx_binding_test(binding_python_pip ${CMAKE_CURRENT_BINARY_DIR}
    FERROX_LIBRARY=$<TARGET_FILE:ferrox>
    FERROX_TEST_MODEL=${_fx_bind_model}
    FERROX_TEST_CHAT_DATA=${_fx_bind_chat_data}
    ${CMAKE_COMMAND} -DPYTHON=${_fx_pip_python} -DSRC=${_fx_bind_src}/python
    -DWORK=${_fx_bind_work}/pip -P ${CMAKE_CURRENT_SOURCE_DIR}/bindings_pip.cmake)
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
  fx_binding_skip(binding_go_consumer "${_fx_go_why}")
else()
  # Everything Go writes goes under the build tree (HOME may be unset in
  # CI), nothing is fetched (go.mod has no requirements), and the test
  # result cache is bypassed because it cannot see libferrox.so change.
  # The header and library come from `#cgo pkg-config: ferrox` and the
  # installed ferrox.pc, as for a user. The cgo preamble is our C code, so
  # it gets the project's -Werror.
  fx_binding_test(binding_go ${_fx_bind_src}/go
    --unset=GOFLAGS --unset=CGO_LDFLAGS
    GOCACHE=${_fx_bind_work}/go-cache
    GOPATH=${_fx_bind_work}/go-path
    GOPROXY=off GO111MODULE=on CGO_ENABLED=1
    CC=${CMAKE_C_COMPILER}
    PKG_CONFIG=${PKG_CONFIG_EXECUTABLE}
    PKG_CONFIG_PATH=${_fx_bind_pc_path}
    "CGO_CFLAGS=-O2 -Wall -Werror"
    LD_LIBRARY_PATH=${_fx_bind_prefix}/${CMAKE_INSTALL_LIBDIR}
    FERROX_TEST_MODEL=${_fx_bind_model}
    FERROX_TEST_CHAT_DATA=${_fx_bind_chat_data}
    ${FX_GO_EXECUTABLE} test -count=1 -v ./...)
  # A user's module requiring this one by its path.
  fx_binding_test(binding_go_consumer ${CMAKE_CURRENT_BINARY_DIR}
    --unset=GOFLAGS --unset=CGO_LDFLAGS
    GOCACHE=${_fx_bind_work}/go-cache
    GOPATH=${_fx_bind_work}/go-path
    GOPROXY=off GO111MODULE=on CGO_ENABLED=1
    CC=${CMAKE_C_COMPILER}
    PKG_CONFIG=${PKG_CONFIG_EXECUTABLE}
    PKG_CONFIG_PATH=${_fx_bind_pc_path}
    LD_LIBRARY_PATH=${_fx_bind_prefix}/${CMAKE_INSTALL_LIBDIR}
    ${CMAKE_COMMAND} -DGO=${FX_GO_EXECUTABLE} -DSRC=${_fx_bind_src}/go
    -DWORK=${_fx_bind_work}/go-consumer -DMODEL=${_fx_bind_model}
    -P ${CMAKE_CURRENT_SOURCE_DIR}/bindings_go_consumer.cmake)
  set_tests_properties(binding_go binding_go_consumer PROPERTIES
    FIXTURES_REQUIRED fx_bind_prefix)
endif()

# ---- Rust: std only, hand-written extern "C" ----
find_program(FX_CARGO_EXECUTABLE cargo HINTS $ENV{HOME}/.cargo/bin /root/.cargo/bin)
set(_fx_rust_why "${_fx_bind_why}")
if(NOT _fx_rust_why AND NOT FX_CARGO_EXECUTABLE)
  set(_fx_rust_why "no cargo found at configure time (Debian: cargo)")
endif()
if(_fx_rust_why)
  foreach(_t binding_rust binding_rust_static binding_rust_lib_dir)
    fx_binding_skip(${_t} "${_fx_rust_why}")
  endforeach()
else()
  # --locked: the committed Cargo.lock (format 3, readable by Debian's
  # cargo) is used as is and never rewritten in the source tree. No
  # LD_LIBRARY_PATH: the shared variants find the library through the
  # rpath build.rs gives the crate's own tests, and the static one must
  # not need it at all. Each variant has its own target directory, so
  # they do not rebuild each other's artifacts.
  set(_fx_rust_env --unset=LD_LIBRARY_PATH --unset=FERROX_STATIC
    FERROX_TEST_MODEL=${_fx_bind_model}
    FERROX_TEST_CHAT_DATA=${_fx_bind_chat_data} "RUSTFLAGS=-D warnings")
  set(_fx_cargo_test ${FX_CARGO_EXECUTABLE} test --offline --locked)
  # pkg-config first, as for a user with ferrox installed.
  fx_binding_test(binding_rust ${_fx_bind_src}/rust ${_fx_rust_env}
    --unset=FERROX_LIB_DIR
    CARGO_TARGET_DIR=${_fx_bind_work}/cargo-target
    PKG_CONFIG=${PKG_CONFIG_EXECUTABLE} PKG_CONFIG_PATH=${_fx_bind_pc_path}
    ${_fx_cargo_test})
  # The static feature: libferrox.a and ferrox.pc's Libs.private.
  fx_binding_test(binding_rust_static ${_fx_bind_src}/rust ${_fx_rust_env}
    --unset=FERROX_LIB_DIR
    CARGO_TARGET_DIR=${_fx_bind_work}/cargo-target-static
    PKG_CONFIG=${PKG_CONFIG_EXECUTABLE} PKG_CONFIG_PATH=${_fx_bind_pc_path}
    ${_fx_cargo_test} --features static)
  # No pkg-config (PKG_CONFIG names a program that fails): FERROX_LIB_DIR,
  # the build's own lib/.
  fx_binding_test(binding_rust_lib_dir ${_fx_bind_src}/rust ${_fx_rust_env}
    CARGO_TARGET_DIR=${_fx_bind_work}/cargo-target-lib-dir
    PKG_CONFIG=false FERROX_LIB_DIR=${_fx_bind_libdir}
    ${_fx_cargo_test})
  set_tests_properties(binding_rust binding_rust_static PROPERTIES
    FIXTURES_REQUIRED fx_bind_prefix)
endif()
