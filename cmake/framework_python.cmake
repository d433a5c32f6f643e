# Which Python a framework op library (bindings/tensorflow, bindings/jax) is
# built against, as Horovod's install decides per framework:
#   TUTTI_WITH_<FW>   AUTO (default): built when a Python with the framework
#                     is found; ON (or 1): not finding one is a configure
#                     error (HOROVOD_WITH_TENSORFLOW=1); OFF (or 0): never.
#                     `pip install` passes $TUTTI_WITH_<FW> (pyproject.toml).
#   TUTTI_<FW>_PYTHON a Python with the framework, named by the user.
# Without one: under `pip install` (SKBUILD) the Python running the build
# (with --no-build-isolation that is the environment's own, which sees its
# framework; pip's isolated build environment has none), else the venv that
# scripts/install-deps makes, build/<venv>/bin/python, looked for in the build
# directory and in <source>/build.

# tutti_framework_python(<out> <FW> <name> <venv>): sets <out> to the Python
# to build the op library of <name> (the framework; <FW> its upper-case
# variable part) against, or "" (with a status message) when there
# is none and TUTTI_WITH_<FW> allows that. Also sets <out>_EXPLICIT to TRUE
# when the Python must have the framework (named by the user, a venv, or ON)
# rather than merely may (pip's own Python under AUTO).
function(tutti_framework_python out fw name venv)
  set(TUTTI_WITH_${fw} AUTO CACHE STRING "Build the ${name} op library: AUTO, ON or OFF")
  set(TUTTI_${fw}_PYTHON "" CACHE FILEPATH
      "Python with ${name} to build tutti's ${name} op library against (empty: found)")
  string(TOUPPER "${TUTTI_WITH_${fw}}" with)
  if(NOT with STREQUAL "AUTO" AND NOT with STREQUAL "")
    if(with)  # 1, ON, YES, TRUE as CMake reads them
      set(with ON)
    else()
      set(with OFF)
    endif()
  endif()
  set(${out} "" PARENT_SCOPE)
  set(${out}_EXPLICIT TRUE PARENT_SCOPE)
  set(${out}_WITH "${with}" PARENT_SCOPE)
  if(with STREQUAL "OFF")
    message(STATUS "tutti: ${name} ops not built (TUTTI_WITH_${fw}=OFF)")
    return()
  endif()
  set(python "${TUTTI_${fw}_PYTHON}")
  if(python STREQUAL "" AND SKBUILD)
    set(python "${Python_EXECUTABLE}")
    if(NOT with STREQUAL "ON")
      set(${out}_EXPLICIT FALSE PARENT_SCOPE)
    endif()
  elseif(python STREQUAL "")
    foreach(dir ${CMAKE_BINARY_DIR} ${CMAKE_SOURCE_DIR}/build)
      if(python STREQUAL "" AND EXISTS ${dir}/${venv}/bin/python)
        set(python ${dir}/${venv}/bin/python)
      endif()
    endforeach()
  endif()
  if(python STREQUAL "")
    if(with STREQUAL "ON")
      message(FATAL_ERROR "TUTTI_WITH_${fw}=ON but no Python with ${name} is known: set "
                          "TUTTI_${fw}_PYTHON, or make build/${venv} (scripts/install-deps)")
    endif()
    message(STATUS "tutti: ${name} ops not built (no TUTTI_${fw}_PYTHON, no build/${venv})")
    return()
  endif()
  set(${out} "${python}" PARENT_SCOPE)
endfunction()

# tutti_framework_unusable(<name> <python> <explicit> <error> <how>): the
# probe of <python> for the framework <name> failed with <error>. A fatal error when the Python had to have
# the framework (<explicit>), else a status message; the caller then returns.
function(tutti_framework_unusable name python explicit error how)
  string(REGEX REPLACE ".*\n([^\n]+)\n?$" "\\1" last "${error}")
  if(explicit)
    message(FATAL_ERROR "${python} cannot import ${name} (${how}): ${last}")
  endif()
  message(STATUS "tutti: ${name} ops not built: ${python} cannot import ${name} (${how})")
endfunction()
