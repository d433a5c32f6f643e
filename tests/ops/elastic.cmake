# --- elastic worker side (docs/elastic.md): membership protocol, ElasticWorker,
# silent-loss detection, and the C API's elastic functions ----------------------
# tutti_elastic_tests: the store protocol against an in-process
# RendezvousServer (the test plays the driver), workers as threads (a forked
# process where one must die), keepalive options read back from real sockets.
add_executable(tutti_elastic_tests
  ops/elastic_membership_test.cc
  ops/elastic_worker_test.cc
  ops/tcp_keepalive_test.cc
)
target_link_libraries(tutti_elastic_tests PRIVATE tutti_coordinator tutti_tcp GTest::gtest_main
                      Threads::Threads tutti_warnings)
gtest_discover_tests(tutti_elastic_tests DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 120
                     LABELS elastic)

# tutti_elastic_c_api_tests: libtutti's tutti_elastic_* with forked workers.
if(TARGET tutti)
  add_executable(tutti_elastic_c_api_tests ops/elastic_c_api_test.cc)
  target_link_libraries(tutti_elastic_c_api_tests PRIVATE tutti tutti_tcp GTest::gtest_main
                        Threads::Threads tutti_warnings)
  gtest_discover_tests(tutti_elastic_c_api_tests DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 120
                       LABELS elastic)
endif()
# --- end elastic worker side -----------------------------------------------------
