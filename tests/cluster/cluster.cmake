# Jobs across hosts (docs/cluster.md): a cluster of 4 network namespaces with
# 1 gbit links (tests/support/cluster.py) stays up for each group of cases
# (tests/cluster/cluster_tests.py). Needs root, iproute2, nftables (faults)
# and /usr/bin/python3 with torch; else the group skips visibly with code 77.
if(TARGET tuttirun AND TARGET tutti AND TARGET tutti-bench)
  set(_cluster_driver /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/cluster/cluster_tests.py
      --tuttirun $<TARGET_FILE:tuttirun> --bench $<TARGET_FILE:tutti-bench>)
  set(_cluster_env "PYTHONPATH=${PROJECT_SOURCE_DIR}/bindings/python"
                   "TUTTI_LIBRARY=$<TARGET_FILE:tutti>")
  foreach(_group jobs faults)
    add_test(NAME cluster_netns_${_group} COMMAND ${_cluster_driver} ${_group})
    set_tests_properties(cluster_netns_${_group} PROPERTIES
      TIMEOUT 600 LABELS "cluster;netns" SKIP_RETURN_CODE 77 ENVIRONMENT "${_cluster_env}")
  endforeach()
endif()
