# The Python package (python/): its cffi extension compiled against this
# build's libtokenkv into build/python/tokenkv/, then its pytest suite, with
# Debian's Python (python3-cffi, python3-numpy, python3-pytest: install-deps).
# Not under the sanitizers: an instrumented libtokenkv cannot load into an
# uninstrumented interpreter.
if(TKV_SANITIZE OR TKV_SANITIZE_THREAD OR TKV_FUZZ)
  return()
endif()
set(TKV_PYTHON /usr/bin/python3 CACHE FILEPATH "The Python the package is built and tested with")
set(tkv_py_stamp ${PROJECT_BINARY_DIR}/python/tokenkv/.built)
add_custom_command(OUTPUT ${tkv_py_stamp}
  COMMAND ${CMAKE_COMMAND} -E env TOKENKV_BUILD_DIR=${PROJECT_BINARY_DIR}
          ${TKV_PYTHON} ${PROJECT_SOURCE_DIR}/python/tokenkv_build.py ${PROJECT_BINARY_DIR}/python
  COMMAND ${CMAKE_COMMAND} -E touch ${tkv_py_stamp}
  DEPENDS tokenkv_shared ${PROJECT_SOURCE_DIR}/python/tokenkv_build.py ${PROJECT_SOURCE_DIR}/include/tokenkv.h
          ${PROJECT_SOURCE_DIR}/include/tokenkv_types.h
  COMMENT "Python: the cffi extension, declarations generated from include/tokenkv.h"
  VERBATIM)
add_custom_target(tokenkv_python ALL DEPENDS ${tkv_py_stamp})
add_test(NAME test_python
  COMMAND ${TKV_PYTHON} -m pytest -q -p no:cacheprovider ${PROJECT_SOURCE_DIR}/python/tests)
set_tests_properties(test_python PROPERTIES TIMEOUT 600
  ENVIRONMENT "PYTHONPATH=${PROJECT_BINARY_DIR}/python:${PROJECT_SOURCE_DIR}/python;TKV_BUILD_DIR=${PROJECT_BINARY_DIR};TKV_SHARED_DIR=${TKV_SHARED_DIR};TKV_BIN=$<TARGET_FILE:tokenkv>;TKV_EXAMPLE_BIN=$<TARGET_FILE:tokenkv-example-service>")
