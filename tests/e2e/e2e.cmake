# End-to-end tests of `tokenkv serve` with the official `openai` npm client
# (tests/e2e/): Node's own test runner starts the real server binary.
# Needs Node.js >= 20 and the packages of tests/e2e/package-lock.json
# (`npm ci --prefix tests/e2e`, which scripts/test runs); without node the
# test is reported as skipped.
find_program(TKV_NODE node)
set(tkv_e2e_dir ${CMAKE_CURRENT_SOURCE_DIR}/e2e)
if(TKV_NODE)
  file(GLOB tkv_e2e_tests CONFIGURE_DEPENDS ${tkv_e2e_dir}/test/*.test.mjs)
  add_test(NAME test_e2e_server
    COMMAND ${TKV_NODE} --test --test-reporter=spec ${tkv_e2e_tests}
    WORKING_DIRECTORY ${tkv_e2e_dir})
else()
  add_test(NAME test_e2e_server COMMAND ${CMAKE_COMMAND} -E echo "test_e2e_server: skipped: node not found")
  set_tests_properties(test_e2e_server PROPERTIES SKIP_REGULAR_EXPRESSION "skipped: node not found")
endif()
# 31 files of node tests: about 2 minutes on a quiet 2-core machine, several times that under ASan on a busy one.
# COST: ctest starts the longest test first, beside the others, rather than last and alone (in the sanitizer
# stage of scripts/test it ran its 2.5 minutes after every other test had finished, one core idle)
# TKV_SANITIZED tells the tests that the server runs under ASan, whose resident memory holds its shadow and
# quarantine (starvation.test.mjs bounds the growth there, not the whole)
set(tkv_e2e_env "TKV_BIN=$<TARGET_FILE:tokenkv>;TKV_MODEL=${TKV_SHARED_DIR}/models/stories260K.gguf;TKV_SHARED_DIR=${TKV_SHARED_DIR}")
if(TKV_SANITIZE)
  list(APPEND tkv_e2e_env "TKV_SANITIZED=asan")
endif()
set_tests_properties(test_e2e_server PROPERTIES COST 10000 TIMEOUT 900 ENVIRONMENT "${tkv_e2e_env}")
