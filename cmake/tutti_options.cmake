# Backend options: AUTO (use when found), ON (required: missing is a configure
# error), OFF. Each backend is its own target; only ops/CMakeLists.txt and the
# generated config header know which are built.
set(TUTTI_WITH_MPI AUTO CACHE STRING "Build the Open MPI backend (AUTO/ON/OFF)")
set(TUTTI_WITH_CUDA AUTO CACHE STRING "Build CUDA support (AUTO/ON/OFF)")
set(TUTTI_WITH_NCCL AUTO CACHE STRING "Build the NCCL backend (AUTO/ON/OFF)")
set_property(CACHE TUTTI_WITH_MPI PROPERTY STRINGS AUTO ON OFF)
set_property(CACHE TUTTI_WITH_CUDA PROPERTY STRINGS AUTO ON OFF)
set_property(CACHE TUTTI_WITH_NCCL PROPERTY STRINGS AUTO ON OFF)

foreach(opt TUTTI_WITH_MPI TUTTI_WITH_CUDA TUTTI_WITH_NCCL)
  if(NOT ${opt} MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "${opt}=${${opt}}: accepted values are AUTO, ON, OFF")
  endif()
endforeach()

# Detection tells the config header what the machine offers. MPI found means
# the tutti_mpi target is built (ops/CMakeLists.txt); CUDA found means
# tutti_cuda (CUDA language enabled here, at the top, so that every target
# linking it can), NCCL found (needs CUDA) means tutti_nccl.
set(TUTTI_HAVE_MPI 0)
if(NOT TUTTI_WITH_MPI STREQUAL "OFF")
  find_package(MPI COMPONENTS C QUIET)
  if(MPI_C_FOUND)
    set(TUTTI_HAVE_MPI 1)
  elseif(TUTTI_WITH_MPI STREQUAL "ON")
    message(FATAL_ERROR "TUTTI_WITH_MPI=ON but Open MPI was not found (apt-get install libopenmpi-dev)")
  endif()
endif()

set(TUTTI_HAVE_CUDA 0)
if(NOT TUTTI_WITH_CUDA STREQUAL "OFF")
  if(NOT DEFINED CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
    set(CUDAToolkit_ROOT /usr/local/cuda)
  endif()
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND AND NOT CMAKE_CUDA_COMPILER AND EXISTS "${CUDAToolkit_BIN_DIR}/nvcc")
    set(CMAKE_CUDA_COMPILER "${CUDAToolkit_BIN_DIR}/nvcc")
  endif()
  if(CUDAToolkit_FOUND AND CMAKE_CUDA_COMPILER)
    # Kernels for the H200 (sm_90) plus compute_90 PTX that newer GPUs JIT.
    # One architecture keeps nvcc's time small; override with
    # -DCMAKE_CUDA_ARCHITECTURES="80;90" for other GPUs.
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    if(NOT DEFINED CMAKE_CUDA_HOST_COMPILER)
      set(CMAKE_CUDA_HOST_COMPILER ${CMAKE_CXX_COMPILER})
    endif()
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    if(CCACHE_PROGRAM)
      set(CMAKE_CUDA_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
    endif()
    set(TUTTI_HAVE_CUDA 1)
  elseif(TUTTI_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "TUTTI_WITH_CUDA=ON but the CUDA toolkit was not found (looked in /usr/local/cuda)")
  endif()
endif()

set(TUTTI_HAVE_NCCL 0)
if(NOT TUTTI_WITH_NCCL STREQUAL "OFF")
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS /usr/local/cuda/include /usr/include)
  find_library(NCCL_LIBRARY nccl HINTS /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY AND TUTTI_HAVE_CUDA)
    set(TUTTI_HAVE_NCCL 1)
  elseif(TUTTI_WITH_NCCL STREQUAL "ON")
    message(FATAL_ERROR "TUTTI_WITH_NCCL=ON but NCCL (nccl.h, libnccl) or CUDA was not found under /usr/local/cuda")
  endif()
endif()
# The NCCL_VERSION_CODE of that nccl.h (NCCL_VERSION(major, minor, patch):
# major * 10000 + minor * 100 + patch from 2.9 on, major * 1000 + minor * 100
# + patch before), for tutti_nccl_version().
set(TUTTI_NCCL_VERSION_CODE 0)
if(TUTTI_HAVE_NCCL)
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_version_lines
       REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) +[0-9]+")
  foreach(_part MAJOR MINOR PATCH)
    string(REGEX MATCH "NCCL_${_part} +([0-9]+)" _match "${_nccl_version_lines}")
    set(_nccl_${_part} ${CMAKE_MATCH_1})
  endforeach()
  if(_nccl_MAJOR GREATER 2 OR (_nccl_MAJOR EQUAL 2 AND _nccl_MINOR GREATER_EQUAL 9))
    math(EXPR TUTTI_NCCL_VERSION_CODE "${_nccl_MAJOR} * 10000 + ${_nccl_MINOR} * 100 + ${_nccl_PATCH}")
  else()
    math(EXPR TUTTI_NCCL_VERSION_CODE "${_nccl_MAJOR} * 1000 + ${_nccl_MINOR} * 100 + ${_nccl_PATCH}")
  endif()
endif()
message(STATUS "tutti: MPI found=${TUTTI_HAVE_MPI} CUDA found=${TUTTI_HAVE_CUDA} NCCL found=${TUTTI_HAVE_NCCL} (${TUTTI_NCCL_VERSION_CODE})")
