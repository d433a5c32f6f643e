# Lightning on backend "tutti" (torch 2.x; docs/torch-distributed.md, "Lightning"):
# examples/lightning_fashion_mnist.py for 30 steps at np 2, DDP under tuttirun,
# DDP and FSDP2 under Lightning's own launcher, and DDP on gloo as the reference
# (tests/python/lightning_jobs.py). Needs the torch 2.x venv of
# `scripts/install-deps --torch2` (build/torch2-venv; skipped without it) and the
# Fashion-MNIST files. About 100 s on 2 loaded cores (70 s of CPU).
if(TARGET tuttirun AND TARGET tutti)
  add_test(NAME python_torch2_lightning_np2
    COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/lightning_jobs.py
            --tuttirun $<TARGET_FILE:tuttirun> --library $<TARGET_FILE:tutti> --np 2
            --timeout 240)
  set_tests_properties(python_torch2_lightning_np2 PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77
                       LABELS "bindings;python;torch2")
endif()
