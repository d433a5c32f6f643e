# --- python_layers, python_ruff, python_mypy: bindings/python's imports, lint,
# types. python_layers: scripts/check-python-imports (no import cycle among the
# package's modules, no tutti import inside a function; ast only, nothing
# imported). python_ruff, python_mypy: scripts/lint-python with build/lint-venv
# (scripts/install-deps --lint; settings in pyproject.toml), skipped when the
# venv is missing.
add_test(NAME python_layers
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/scripts/check-python-imports --quiet)
# The check on a made-up package with a cycle and two bad function-level imports.
add_test(NAME python_layers_self_test
         COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/scripts/check-python-imports --self-test)
foreach(_tool ruff mypy)
  add_test(NAME python_${_tool} COMMAND ${PROJECT_SOURCE_DIR}/scripts/lint-python ${_tool})
endforeach()
set_tests_properties(python_layers python_layers_self_test python_ruff python_mypy PROPERTIES
                     TIMEOUT 120 SKIP_RETURN_CODE 77 LABELS "lint;python")
# --- end python_layers ------------------------------------------------------------
