# ctest install_header_check (cmake -P): rg_check_api_headers (check_headers.cmake) on a scratch include
# tree holding one clean header and one header per kind of include it must reject, so that
# install_consumer's check is known to fail where it should. Input: RG_WORK_DIR (a scratch folder).
cmake_minimum_required(VERSION 3.25)
include("${CMAKE_CURRENT_LIST_DIR}/check_headers.cmake")

set(inc "${RG_WORK_DIR}/include")
file(REMOVE_RECURSE "${inc}")
# Clean: the standard library and an installed ringguard header.
file(WRITE "${inc}/ringguard/core/clean.h"
     "#pragma once\n#include <cstdint>\n#include <unordered_map>\n#include \"ringguard/core/other.h\"\n")
file(WRITE "${inc}/ringguard/core/other.h" "#pragma once\n#include <string>\n")
# Rejected, one line each: a private header by its src/ path, a ringguard/ path that is not installed, and
# the third-party headers the API must not need.
set(bad_lines
  "#include \"core/trailer.h\""
  "#include \"ringguard/algorithms/collective.h\""
  "#include <spdlog/spdlog.h>"
  "#include <fmt/format.h>"
  "#include <mpi.h>"
  "#include <cuda_runtime.h>"
  "#include <cuda_runtime_api.h>"
  "#include <nccl.h>")
set(i 0)
foreach(line IN LISTS bad_lines)
  file(WRITE "${inc}/ringguard/bad/bad${i}.h" "#pragma once\n#include <vector>\n${line}\n")
  math(EXPR i "${i} + 1")
endforeach()

rg_check_api_headers("${inc}" errors)
list(LENGTH errors n_errors)
list(LENGTH bad_lines n_bad)
if(NOT n_errors EQUAL n_bad)
  message(FATAL_ERROR "install_header_check: expected ${n_bad} rejected lines, got ${n_errors}: ${errors}")
endif()
set(i 0)
foreach(line IN LISTS bad_lines)
  list(GET errors ${i} error)
  if(NOT error STREQUAL "${inc}/ringguard/bad/bad${i}.h: ${line}")
    message(FATAL_ERROR "install_header_check: entry ${i} is '${error}', expected bad${i}.h: ${line}")
  endif()
  math(EXPR i "${i} + 1")
endforeach()
message(STATUS "install_header_check: passed (${n_bad} rejected, the clean headers accepted)")
