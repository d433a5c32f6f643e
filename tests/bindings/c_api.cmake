# --- tutti_c_api_tests: libtutti's handle functions through the C ABI ---------
# One rank (TUTTI_SIZE=1) in the test process: the C API has one runtime per
# process; two-rank cases fork their ranks.
if(TARGET tutti)
  add_executable(tutti_c_api_tests bindings/c_api_handles_test.cc bindings/c_api_callback_test.cc
                 bindings/c_api_p2p_test.cc bindings/c_api_ordered_test.cc)
  target_link_libraries(tutti_c_api_tests PRIVATE tutti GTest::gtest_main tutti_warnings)
  gtest_discover_tests(tutti_c_api_tests DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 120
                       LABELS bindings)
endif()
# --- end tutti_c_api_tests -----------------------------------------------------
