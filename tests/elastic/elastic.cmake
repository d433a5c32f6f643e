# Multi-host elastic jobs: hosts are network namespaces made by the test
# (tests/support/cluster.py; needs root and iproute2, else the tests skip
# visibly with code 77). Workers: tests/elastic/elastic_worker.py (torch).
if(TARGET tuttirun AND TARGET tutti)
  set(_elastic_driver /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/elastic/elastic_tests.py
      --tuttirun $<TARGET_FILE:tuttirun>)
  set(_elastic_env "PYTHONPATH=${PROJECT_SOURCE_DIR}/bindings/python"
                   "TUTTI_LIBRARY=$<TARGET_FILE:tutti>")
  foreach(_case kill_host link_down stop_host add_host min_np reset_limit)
    add_test(NAME elastic_${_case} COMMAND ${_elastic_driver} ${_case})
    set_tests_properties(elastic_${_case} PROPERTIES
      TIMEOUT 400 LABELS "elastic" SKIP_RETURN_CODE 77 ENVIRONMENT "${_elastic_env}")
  endforeach()
endif()
