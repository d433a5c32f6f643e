# The Python tests on PyPI's current torch 2.x (docs/torch-distributed.md):
# the interpreter of build/torch2-venv (scripts/install-deps --torch2, which
# scripts/test runs), beside Debian's torch 1.13 that bindings_python_np* use.
# Each test exits 77 (skipped) when the venv is missing.
#   python_torch2_np2        tests/python whole, under tuttirun -np 2
#   python_torch2_dist_np3   the torch.distributed files at np 3
#   python_torch2_fsdp_np4   FSDP2 and HSDP (a 2 x 2 mesh) at np 4
#   python_torch2_torchrun_np2  pytest and the DDP example under torch 2.x's torchrun
#   python_torch2_exits_np2  20 torchrun jobs ending every way: no abort at exit
#   python_torch2_main_job   the main job with the venv's installed wheel (no source tree)
set(TUTTI_TORCH2_PYTHON "${PROJECT_SOURCE_DIR}/build/torch2-venv/bin/python" CACHE FILEPATH
    "The torch 2.x interpreter of the python_torch2_* tests")
if(TARGET tuttirun AND TARGET tutti)
  set(_t2_jobs /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/run_job_tests.py)
  set(_t2_dist /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/torch_distributed_jobs.py)
  set(_t2_common --tuttirun $<TARGET_FILE:tuttirun> --library $<TARGET_FILE:tutti>
                 --python ${TUTTI_TORCH2_PYTHON})
  add_test(NAME python_torch2_np2
    COMMAND ${_t2_jobs} pytest --np 2 ${_t2_common} --timeout 600)
  add_test(NAME python_torch2_dist_np3
    COMMAND ${_t2_jobs} pytest --np 3 ${_t2_common} --timeout 400
            --files test_torch_distributed.py test_torch_dist_tensor_collectives.py
                    test_torch_dist_p2p.py test_torch_distributed_gloo.py test_torch_ddp.py)
  add_test(NAME python_torch2_fsdp_np4
    COMMAND ${_t2_jobs} pytest --np 4 ${_t2_common} --timeout 400 --files test_torch_fsdp.py)
  add_test(NAME python_torch2_main_job
    COMMAND ${_t2_jobs} main-job --np 2 ${_t2_common} --wheel --timeout 600)
  add_test(NAME python_torch2_torchrun_np2
    COMMAND ${_t2_dist} torchrun --np 2 --library $<TARGET_FILE:tutti>
            --python ${TUTTI_TORCH2_PYTHON} --timeout 400)
  add_test(NAME python_torch2_exits_np2
    COMMAND ${_t2_dist} exits --np 2 --runs 20 --library $<TARGET_FILE:tutti>
            --python ${TUTTI_TORCH2_PYTHON} --timeout 120)
  set_tests_properties(python_torch2_np2 python_torch2_dist_np3 python_torch2_fsdp_np4
                       python_torch2_main_job python_torch2_torchrun_np2 python_torch2_exits_np2
    PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77 LABELS "bindings;python;torch2")
endif()
