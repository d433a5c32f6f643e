# --- fuzzing (issue 18), the normal build's part ---------------------------------
# The fuzz targets themselves build only in the fuzz configuration
# (tests/fuzz/CMakeLists.txt, scripts/fuzz). Here: the regression tests of what
# fuzzing found, the brief fuzz run of every target (CI; skipped, exit 77, when
# build-fuzz/ was not built: scripts/test builds it), and the recording of seed
# corpora from real jobs (tests/fuzz/record_seeds.py; checks that it still
# records every kind of traffic).
add_executable(tutti_fuzz_regressions_tests fuzz/regressions_test.cc)
target_link_libraries(tutti_fuzz_regressions_tests PRIVATE tutti_core tutti_tcp GTest::gtest
                      GTest::gtest_main tutti_warnings)
gtest_discover_tests(tutti_fuzz_regressions_tests DISCOVERY_TIMEOUT 60 PROPERTIES LABELS fuzz)

set(_fuzz_build ${PROJECT_SOURCE_DIR}/build-fuzz)
if(DEFINED ENV{TUTTI_FUZZ_BUILD_DIR})
  set(_fuzz_build $ENV{TUTTI_FUZZ_BUILD_DIR})
endif()
add_test(NAME fuzz_all_brief
  COMMAND sh -c "test -x '${_fuzz_build}/tests/fuzz/fuzz_hello' || { echo 'no fuzz build in ${_fuzz_build}: scripts/fuzz build'; exit 77; }; TUTTI_FUZZ_BUILD_DIR='${_fuzz_build}' '${PROJECT_SOURCE_DIR}/scripts/fuzz' all 3"
  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(fuzz_all_brief PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS fuzz)

if(TARGET tuttirun AND TARGET tutti)
  add_test(NAME fuzz_record_seeds
    COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/record_seeds.py
            --tuttirun $<TARGET_FILE:tuttirun> --out ${CMAKE_CURRENT_BINARY_DIR}/fuzz_seeds)
  set_tests_properties(fuzz_record_seeds PROPERTIES TIMEOUT 300 LABELS fuzz
    ENVIRONMENT "PYTHONPATH=${PROJECT_SOURCE_DIR}/bindings/python;TUTTI_LIBRARY=$<TARGET_FILE:tutti>")
endif()
# --- end fuzzing -------------------------------------------------------------------
