# binding_go_consumer (tests/bindings.cmake): a user's module requires
# github.com/ferrox-ai/ferrox/bindings/go by its path and version, fetched
# with `go get` from a module proxy made here from the checkout (a
# GOPROXY=file:// folder, so nothing leaves the machine; a module whose
# go.mod declares another path is refused there, as a real proxy would
# have it), builds with nothing but pkg-config finding ferrox, and runs.
#   cmake -DGO=exe -DSRC=bindings/go -DWORK=dir -DMODEL=gguf
#         -P bindings_go_consumer.cmake
set(mod github.com/ferrox-ai/ferrox/bindings/go)
set(ver v0.1.0)
file(REMOVE_RECURSE ${WORK})

# The proxy: @v/list, .info, .mod and the .zip of the module's files, each
# under the prefix "<module>@<version>/".
set(at ${WORK}/proxy/${mod}/@v)
file(MAKE_DIRECTORY ${at})
file(WRITE ${at}/list "${ver}\n")
file(WRITE ${at}/${ver}.info "{\"Version\":\"${ver}\",\"Time\":\"2026-01-01T00:00:00Z\"}\n")
file(READ ${SRC}/go.mod gomod)
file(WRITE ${at}/${ver}.mod "${gomod}")
file(GLOB files RELATIVE ${SRC} ${SRC}/go.mod ${SRC}/*.go ${SRC}/README.md)
set(stage ${WORK}/stage)
foreach(f ${files})
  file(COPY ${SRC}/${f} DESTINATION ${stage}/${mod}@${ver})
endforeach()
execute_process(COMMAND ${CMAKE_COMMAND} -E tar cf ${at}/${ver}.zip
                        --format=zip ${mod}@${ver}
                WORKING_DIRECTORY ${stage} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cannot zip the module (${rc})")
endif()

set(app ${WORK}/app)
file(MAKE_DIRECTORY ${app})
file(WRITE ${app}/go.mod "module example.com/consumer\n\ngo 1.19\n")
file(WRITE ${app}/main.go [=[
package main

import (
	"fmt"
	"os"

	"github.com/ferrox-ai/ferrox/bindings/go"
)

func main() {
	m, err := ferrox.LoadModel(os.Args[1], nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer m.Close()
	fmt.Printf("ferrox %s, vocabulary of %d\n", ferrox.Version(), m.VocabSize())
}
]=])
set(ENV{GOPROXY} file://${WORK}/proxy)
set(ENV{GOSUMDB} off)
# A module cache of its own, emptied with WORK each run (writable, so it
# can be), so that the module is fetched from the proxy every time.
set(ENV{GOMODCACHE} ${WORK}/modcache)
set(ENV{GOFLAGS} -modcacherw)
foreach(step "get;${mod}@${ver}" "build;-o;consumer;.")
  execute_process(COMMAND ${GO} ${step} WORKING_DIRECTORY ${app}
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "go ${step} failed (${rc})")
  endif()
endforeach()
execute_process(COMMAND ${app}/consumer ${MODEL}
                OUTPUT_VARIABLE out RESULT_VARIABLE rc)
message("${out}")
if(NOT rc EQUAL 0 OR NOT out MATCHES "^ferrox [0-9]+[.][0-9]+[.][0-9]+, vocabulary of [1-9]")
  message(FATAL_ERROR "the consumer failed (${rc})")
endif()
