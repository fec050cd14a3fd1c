# binding_python_pip (tests/bindings.cmake): pip builds and installs the
# Python package the way its README says for a machine without PyPI
# (--no-build-isolation: the interpreter's own setuptools and wheel), into
# a --target directory, and the binding's suite runs against that copy.
#   cmake -DPYTHON=exe -DSRC=bindings/python -DWORK=dir -P bindings_pip.cmake
# From a copy of the folder: setuptools writes build/ and *.egg-info next
# to pyproject.toml, which must not land in the source tree.
file(REMOVE_RECURSE ${WORK})
file(COPY ${SRC}/ DESTINATION ${WORK}/src
     PATTERN build EXCLUDE PATTERN *.egg-info EXCLUDE PATTERN __pycache__ EXCLUDE)
execute_process(
  COMMAND ${PYTHON} -m pip install --no-build-isolation --no-index --no-deps
          --disable-pip-version-check --target ${WORK}/site ${WORK}/src
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pip install failed (${rc})")
endif()
# From outside both folders, so that only the installed copy is importable.
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env FERROX_TEST_INSTALLED=${WORK}/site
          PYTHONDONTWRITEBYTECODE=1
          ${PYTHON} -W error -m unittest discover -v -s ${WORK}/src/tests
          -t ${WORK}/src/tests
  WORKING_DIRECTORY ${WORK}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the suite failed against the installed package")
endif()
