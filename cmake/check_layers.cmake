# Checks that includes point one way (docs/architecture.md). Every C, C++ and
# CUDA source of a layer folder may include only the folders its rule lists;
# an include of any other folder of the project fails with the file, the line
# and the rule.
#
# Runs at configure time (CMakeLists.txt includes it) and as the ctest
# `layers` (cmake -DTUTTI_SOURCE_DIR=<root> -P cmake/check_layers.cmake).
# Only quoted includes of project folders are read ("ops/backend.h");
# <system> includes and the generated "tutti/config.h" are allowed everywhere.
# tests/, bench/ and examples/ sit above every layer and are not checked.

cmake_policy(SET CMP0057 NEW)  # if(IN_LIST) under cmake -P

if(NOT TUTTI_SOURCE_DIR)
  set(TUTTI_SOURCE_DIR "${CMAKE_CURRENT_LIST_DIR}/..")
endif()
get_filename_component(TUTTI_SOURCE_DIR "${TUTTI_SOURCE_DIR}" ABSOLUTE)

# Folder -> the project folders its files may include (itself included).
# Keep in step with docs/architecture.md.
set(_layer_folders core compression ops coordinator bindings launcher)
set(_allowed_core core)
set(_allowed_compression core compression)
set(_allowed_ops core ops)
set(_allowed_coordinator core compression ops coordinator)
set(_allowed_bindings core ops coordinator bindings)
# The launcher serves the rendezvous store itself (ops/tcp/rendezvous_server.h);
# nothing else of ops/.
set(_allowed_launcher core launcher ops/tcp/rendezvous_server.h)
# Project folders an include can name; anything else is a third-party path.
set(_project_folders core compression ops coordinator bindings launcher tests bench examples)

function(_tutti_allowed include_path allowed_list out)
  set(ok FALSE)
  foreach(prefix IN LISTS allowed_list)
    if(include_path STREQUAL prefix OR include_path MATCHES "^${prefix}/")
      set(ok TRUE)
    endif()
  endforeach()
  set(${out} ${ok} PARENT_SCOPE)
endfunction()

set(_violations "")
foreach(folder IN LISTS _layer_folders)
  file(GLOB_RECURSE _files
    "${TUTTI_SOURCE_DIR}/${folder}/*.h" "${TUTTI_SOURCE_DIR}/${folder}/*.cc"
    "${TUTTI_SOURCE_DIR}/${folder}/*.c" "${TUTTI_SOURCE_DIR}/${folder}/*.cu")
  foreach(file IN LISTS _files)
    file(STRINGS "${file}" _lines REGEX "^[ \t]*#[ \t]*include[ \t]+\"")
    foreach(line IN LISTS _lines)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+\"([^\"]+)\".*" "\\1" inc "${line}")
      string(REGEX MATCH "^[^/]+" top "${inc}")
      if(NOT top IN_LIST _project_folders)
        continue()
      endif()
      _tutti_allowed("${inc}" "${_allowed_${folder}}" ok)
      if(NOT ok)
        file(RELATIVE_PATH rel "${TUTTI_SOURCE_DIR}" "${file}")
        string(REPLACE ";" ", " rule "${_allowed_${folder}}")
        list(APPEND _violations "  ${rel}: #include \"${inc}\" (${folder}/ may include: ${rule})")
      endif()
    endforeach()
  endforeach()
endforeach()

if(_violations)
  string(REPLACE ";" "\n" _text "${_violations}")
  message(FATAL_ERROR
    "tutti: includes that point the wrong way (docs/architecture.md):\n${_text}")
endif()
