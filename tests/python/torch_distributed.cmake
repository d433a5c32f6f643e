# torch.distributed backend "tutti" (docs/torch-distributed.md). The pytest
# files run in bindings_python_np{1,2,3} with the rest of tests/python; here:
# the same files and the DDP example under torchrun at np 2, and a peer
# SIGKILLed mid-backward (survivors must fail within TUTTI_TIMEOUT_SECONDS).
# Needs /usr/bin/python3 with torch and pytest, and the Fashion-MNIST files.
if(TARGET tutti)
  set(_py_tdist_driver /usr/bin/python3
      ${CMAKE_CURRENT_SOURCE_DIR}/python/torch_distributed_jobs.py)
  add_test(NAME python_torch_distributed_torchrun_np2
    COMMAND ${_py_tdist_driver} torchrun --np 2 --library $<TARGET_FILE:tutti> --timeout 400)
  add_test(NAME python_torch_distributed_kill_np3
    COMMAND ${_py_tdist_driver} kill --np 3 --library $<TARGET_FILE:tutti> --timeout 120)
  # No abort at exit (every exit mode once; torch 2.x runs 20: torch2.cmake).
  add_test(NAME python_torch_distributed_exits_np2
    COMMAND ${_py_tdist_driver} exits --np 2 --runs 4 --library $<TARGET_FILE:tutti> --timeout 120)
  set_tests_properties(python_torch_distributed_exits_np2 PROPERTIES TIMEOUT 600
                       LABELS "bindings;python")
  set_tests_properties(python_torch_distributed_torchrun_np2 PROPERTIES TIMEOUT 900
                       LABELS "bindings;python")
  set_tests_properties(python_torch_distributed_kill_np3 PROPERTIES TIMEOUT 180
                       LABELS "bindings;python")
endif()
