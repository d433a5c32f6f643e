# --- tensorflow_*: tutti.tensorflow and tutti.keras under tuttirun -----------------
# The TensorFlow venv's Python (TUTTI_TENSORFLOW_PYTHON, scripts/install-deps
# --tensorflow makes build/tf-venv) runs tests/tensorflow on every rank, and a
# short epoch of examples/tensorflow_fashion_mnist.py, and a rank that dies. Without the venv or the
# op library the driver says so and exits 77: ctest reports them skipped.
set(_tf_python "${TUTTI_TF_PYTHON_USED}")  # bindings/tensorflow/CMakeLists.txt
if(_tf_python STREQUAL "")
  set(_tf_python ${PROJECT_SOURCE_DIR}/build/tf-venv/bin/python)  # where install-deps puts it
endif()
set(_tf_library "")
if(TARGET tutti_tensorflow)
  set(_tf_library $<TARGET_FILE:tutti_tensorflow>)
endif()
set(_tf_driver /usr/bin/python3 ${CMAKE_CURRENT_LIST_DIR}/run_tf_tests.py)
set(_tf_args --tuttirun $<TARGET_FILE:tuttirun> --library $<TARGET_FILE:tutti>
             --tf-library "${_tf_library}" --python ${_tf_python})
foreach(_np 1 2 3)
  add_test(NAME tensorflow_np${_np} COMMAND ${_tf_driver} pytest --np ${_np} ${_tf_args})
endforeach()
add_test(NAME tensorflow_example_np2 COMMAND ${_tf_driver} example --np 2 ${_tf_args})
add_test(NAME tensorflow_peer_lost_np3 COMMAND ${_tf_driver} peer-lost --np 3 ${_tf_args})
add_test(NAME tensorflow_elastic_kill COMMAND ${_tf_driver} elastic-kill ${_tf_args})
add_test(NAME tensorflow_keras_elastic_kill COMMAND ${_tf_driver} keras-elastic-kill ${_tf_args})
add_test(NAME tensorflow_tf1_mode_np2 COMMAND ${_tf_driver} tf1-mode --np 2 ${_tf_args})
# The wheel that scripts/install-deps --tensorflow installs into the venv,
# used alone: its tuttirun, libtutti.so and TensorFlow op library.
add_test(NAME tensorflow_wheel_np2 COMMAND ${_tf_driver} wheel --np 2 ${_tf_args})
set_tests_properties(tensorflow_np1 tensorflow_np2 tensorflow_np3 tensorflow_example_np2
                     tensorflow_peer_lost_np3 tensorflow_elastic_kill tensorflow_keras_elastic_kill
                     tensorflow_wheel_np2 tensorflow_tf1_mode_np2
  PROPERTIES TIMEOUT 600 LABELS "tensorflow;python" SKIP_RETURN_CODE 77)
# --- end tensorflow_* ----------------------------------------------------------------
