# --- jax_*: tutti.jax under tuttirun ------------------------------------------------
# The JAX venv's Python (TUTTI_JAX_PYTHON, scripts/install-deps --jax makes
# build/jax-venv) runs tests/jax on every rank, and a short run of
# examples/jax_fashion_mnist.py. Without the venv or the handler library the
# driver says so and exits 77: ctest reports them skipped.
set(_jax_python "${TUTTI_JAX_PYTHON_USED}")  # bindings/jax/CMakeLists.txt
if(_jax_python STREQUAL "")
  set(_jax_python ${PROJECT_SOURCE_DIR}/build/jax-venv/bin/python)  # where install-deps puts it
endif()
set(_jax_library "")
if(TARGET tutti_jax)
  set(_jax_library $<TARGET_FILE:tutti_jax>)
endif()
set(_jax_driver /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/run_jax_tests.py)
set(_jax_args --tuttirun $<TARGET_FILE:tuttirun> --library $<TARGET_FILE:tutti>
              --jax-library "${_jax_library}" --python ${_jax_python})
foreach(_np 1 2 3)
  add_test(NAME jax_np${_np} COMMAND ${_jax_driver} pytest --np ${_np} ${_jax_args})
endforeach()
add_test(NAME jax_example_np2 COMMAND ${_jax_driver} example --np 2 ${_jax_args})
# The wheel that scripts/install-deps --jax installs into the venv, used alone.
add_test(NAME jax_wheel_np2 COMMAND ${_jax_driver} wheel --np 2 ${_jax_args})
add_test(NAME jax_elastic_kill COMMAND ${_jax_driver} elastic-kill ${_jax_args})
set_tests_properties(jax_np1 jax_np2 jax_np3 jax_example_np2 jax_wheel_np2 jax_elastic_kill
  PROPERTIES TIMEOUT 600 LABELS "jax;python" SKIP_RETURN_CODE 77)
# --- end jax_* ------------------------------------------------------------------------
