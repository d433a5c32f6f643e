# TUTTI_SANITIZE: build every target with the named sanitizers
# (scripts/sanitize configures it in build-asan/, build-ubsan/, build-tsan/).
#   address;undefined   AddressSanitizer (with LeakSanitizer) and UBSan
#   undefined           UBSan alone
#   thread              ThreadSanitizer (cannot be combined with address)
#   OFF                 none (the default)
# UBSan findings abort the process (-fno-sanitize-recover), so a test with
# undefined behaviour fails instead of printing and passing. The suppression
# and option files are in tests/sanitize/ (scripts/sanitize sets the
# *SAN_OPTIONS that name them).
set(TUTTI_SANITIZE OFF CACHE STRING
    "Sanitizers for every target: address;undefined, undefined, thread, or OFF")
if(TUTTI_SANITIZE)
  foreach(_san IN LISTS TUTTI_SANITIZE)
    if(NOT _san MATCHES "^(address|undefined|thread)$")
      message(FATAL_ERROR "TUTTI_SANITIZE=${TUTTI_SANITIZE}: '${_san}' is not a sanitizer; "
                          "accepted: address;undefined, undefined, thread, OFF")
    endif()
  endforeach()
  if("thread" IN_LIST TUTTI_SANITIZE AND "address" IN_LIST TUTTI_SANITIZE)
    message(FATAL_ERROR "TUTTI_SANITIZE=${TUTTI_SANITIZE}: thread and address cannot be combined")
  endif()
  list(JOIN TUTTI_SANITIZE "," _tutti_sanitizers)
  # -O1 with line tables (-g1): the sanitizers' usual setting, readable stacks
  # at a third of -O2 -g's compile time. (Last on the command line, so it
  # wins over the build type's -O and -g.)
  add_compile_options(
    "$<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=${_tutti_sanitizers};-fno-omit-frame-pointer;-O1;-g1>")
  if("undefined" IN_LIST TUTTI_SANITIZE)
    add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-fno-sanitize-recover=undefined>")
  endif()
  add_link_options(-fsanitize=${_tutti_sanitizers})
  message(STATUS "tutti: sanitizers ${_tutti_sanitizers}")
endif()
