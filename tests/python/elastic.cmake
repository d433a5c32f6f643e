# tutti.elastic / tutti.torch.elastic (docs/elastic.md), without the elastic
# driver: State/ObjectState/TorchState commit/restore/sync, the ElasticSampler's
# dealing, hvd.elastic.run with a fake reset (bindings_python_np* run these
# files too, with the rest of tests/python); then the elastic example. Needs
# /usr/bin/python3 with torch and pytest, and the Fashion-MNIST files.
if(TARGET tuttirun AND TARGET tutti)
  set(_py_elastic_files test_elastic_run.py test_elastic_sampler.py test_elastic_state.py)
  set(_py_elastic_driver /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/run_job_tests.py)
  # One process, no launcher: a job of one rank.
  set(_py_elastic_paths ${_py_elastic_files})
  list(TRANSFORM _py_elastic_paths PREPEND ${CMAKE_CURRENT_SOURCE_DIR}/python/)
  add_test(NAME python_elastic_np1
    COMMAND /usr/bin/python3 -m pytest -q -x -p no:cacheprovider ${_py_elastic_paths})
  set_tests_properties(python_elastic_np1 PROPERTIES TIMEOUT 120 LABELS "elastic;python"
    ENVIRONMENT "PYTHONPATH=${PROJECT_SOURCE_DIR}/bindings/python;TUTTI_LIBRARY=$<TARGET_FILE:tutti>")
  foreach(_np 2 3)
    add_test(NAME python_elastic_np${_np}
      COMMAND ${_py_elastic_driver} pytest --np ${_np} --tuttirun $<TARGET_FILE:tuttirun>
              --library $<TARGET_FILE:tutti> --timeout 240 --files ${_py_elastic_files})
    set_tests_properties(python_elastic_np${_np} PROPERTIES TIMEOUT 300 LABELS "elastic;python")
  endforeach()
  # examples/torch_fashion_mnist_elastic.py: as a plain job, and under the
  # elastic driver with two host names of this machine (no root, no netns):
  # a worker SIGKILLed mid-run, a host added by discovery.
  set(_py_example_driver /usr/bin/python3
      ${CMAKE_CURRENT_SOURCE_DIR}/python/elastic_example_jobs.py)
  foreach(_case plain kill grow)
    add_test(NAME python_elastic_example_${_case}
      COMMAND ${_py_example_driver} ${_case} --tuttirun $<TARGET_FILE:tuttirun>
              --library $<TARGET_FILE:tutti> --timeout 300)
    set_tests_properties(python_elastic_example_${_case} PROPERTIES TIMEOUT 360
      LABELS "elastic;python")
  endforeach()
endif()
