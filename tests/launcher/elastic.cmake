# --- elastic driver (docs/elastic.md): tuttirun's side ---------------------------
# Unit tests: store keys, rank order and placement of generations, blacklist
# cooldown, the driver's state machine (no processes), discovery parsing and
# running, elastic and --rsh-agent flags. Process tests
# (tests/launcher/elastic_tests.py): real tuttirun jobs whose workers are
# tests/launcher/fake_elastic_worker.py (joins generations through the store
# with tutti_rendezvous_helper; no tutti runtime); hosts h1, h2, ... are this
# machine, reached through --rsh-agent 'env TUTTI_FAKE_HOST={host}'.
add_executable(tutti_launcher_elastic_tests
  launcher/elastic_cli_test.cc
  launcher/elastic_driver_test.cc
  launcher/elastic_generation_test.cc
)
target_link_libraries(tutti_launcher_elastic_tests PRIVATE tutti_launcher GTest::gtest_main
                      tutti_warnings)
# One label that `ctest -L launcher` and `ctest -L elastic` both match (a
# list does not survive gtest_discover_tests' PROPERTIES).
gtest_discover_tests(tutti_launcher_elastic_tests DISCOVERY_TIMEOUT 60
                     PROPERTIES LABELS "launcher-elastic")

if(TARGET tutti_tcp)
  # RendezvousServer::set/get, what the driver publishes generations with.
  add_executable(tutti_rendezvous_server_set_tests launcher/rendezvous_server_set_test.cc)
  target_link_libraries(tutti_rendezvous_server_set_tests PRIVATE tutti_tcp GTest::gtest_main
                        tutti_warnings)
  gtest_discover_tests(tutti_rendezvous_server_set_tests DISCOVERY_TIMEOUT 60
                       PROPERTIES LABELS "launcher-elastic")
endif()

if(TARGET tuttirun AND TARGET tutti_rendezvous_helper)
  set(_elastic_driver /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/launcher/elastic_tests.py
      --tuttirun $<TARGET_FILE:tuttirun> --helper $<TARGET_FILE:tutti_rendezvous_helper>)
  foreach(_case worker_fails report_lost min_np_timeout reset_limit discovery_first_run_fails
                discovery_adds_and_removes host_added_after_last_commit
                blacklist_cooldown elastic_sigint rsh_agent
                rsh_agent_appends_host bad_elastic_flags)
    add_test(NAME elastic_driver_${_case} COMMAND ${_elastic_driver} ${_case})
    set_tests_properties(elastic_driver_${_case} PROPERTIES TIMEOUT 120
                         LABELS "launcher;elastic")
  endforeach()
endif()
# --- end elastic driver ------------------------------------------------------------
