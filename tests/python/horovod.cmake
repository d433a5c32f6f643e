# Horovod parity (docs/horovod.md): the pytest files test_horovod_*.py and
# test_adasum_tiny.py run in bindings_python_np{1,2,3} with the rest of
# tests/python (and test_adasum_tiny.py in bindings_python_adasum_np4); here:
# Adasum's tiny magnitudes at 8 ranks on tcp and at 2, 4 and 8 under mpirun
# (the C++ cases too, tests/cases/adasum_test.cc), the parity files on the mpi
# backend, and tutti.horovod_compat: the runner's mapping and its refusal to
# shadow a real Horovod, and the unchanged Horovod example under
# `tuttirun --horovod-compat` at np 2 (needs the Fashion-MNIST files).
if(TARGET tuttirun AND TARGET tutti)
  set(_hvd_pytest /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/run_job_tests.py pytest
      --tuttirun $<TARGET_FILE:tuttirun> --library $<TARGET_FILE:tutti>)
  add_test(NAME bindings_python_adasum_tiny_np8
    COMMAND ${_hvd_pytest} --np 8 --timeout 300 --files test_adasum_tiny.py)
  set(_hvd_compat /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/horovod_compat_jobs.py)
  add_test(NAME horovod_compat_runner COMMAND ${_hvd_compat} runner --library $<TARGET_FILE:tutti>)
  add_test(NAME horovod_compat_example_np2
    COMMAND ${_hvd_compat} example --np 2 --tuttirun $<TARGET_FILE:tuttirun>
            --library $<TARGET_FILE:tutti>)
  set_tests_properties(bindings_python_adasum_tiny_np8 horovod_compat_runner
                       horovod_compat_example_np2 PROPERTIES TIMEOUT 600 LABELS "bindings;python")
  if(TARGET tutti_mpi)
    add_test(NAME mpi_python_horovod_np2
      COMMAND ${_hvd_pytest} --np 2 --mpi --timeout 300
              --files test_adasum_tiny.py test_horovod_optimizer_state.py test_horovod_mpi_ops.py
                      test_horovod_messages.py test_queries.py)
    foreach(_np 4 8)
      add_test(NAME mpi_python_adasum_tiny_np${_np}
        COMMAND ${_hvd_pytest} --np ${_np} --mpi --timeout 300 --files test_adasum_tiny.py)
    endforeach()
    set_tests_properties(mpi_python_horovod_np2 mpi_python_adasum_tiny_np4
                         mpi_python_adasum_tiny_np8 PROPERTIES TIMEOUT 400 LABELS "mpi;python")
  endif()
endif()
if(TARGET tutti_mpi_cases_tests)
  # mpi_cases_np{2,4} run every case; 8 ranks for Adasum only.
  set(_hvd_mpirun ${MPIEXEC_EXECUTABLE})
  if(NOT _hvd_mpirun)
    set(_hvd_mpirun mpirun)
  endif()
  add_test(NAME mpi_cases_adasum_np8
    COMMAND ${_hvd_mpirun} --allow-run-as-root --oversubscribe --bind-to none
            --mca mpi_yield_when_idle 1 -np 8 $<TARGET_FILE:tutti_mpi_cases_tests>
            --gtest_filter=*Adasum*)
  set_tests_properties(mpi_cases_adasum_np8 PROPERTIES TIMEOUT 300 LABELS "mpi")
endif()
