# ctest driver of install_consumer (cmake -P):
#   1. cmake --install <build> --prefix <work>/prefix
#   2. check the installed package (config files present, headers that include only the API and the
#      standard library, nothing pointing back into the source/build tree)
#   3. configure + build tests/install/consumer against the prefix (CMAKE_PREFIX_PATH), same generator
#      and compilers as the parent build: it compiles every installed header on its own
#   4. run the consumer (it checks crc32("123456789") == 0xCBF43926)
#
# Inputs: RG_PARAMS (the script written by tests/install/CMakeLists.txt), RG_CONFIG (the ctest config,
# may be empty).
cmake_minimum_required(VERSION 3.25)

if(NOT RG_PARAMS OR NOT EXISTS "${RG_PARAMS}")
  message(FATAL_ERROR "install_consumer: RG_PARAMS='${RG_PARAMS}' does not exist (re-run cmake on the build)")
endif()
include("${RG_PARAMS}")
foreach(_v IN ITEMS RG_BUILD_DIR RG_SOURCE_DIR RG_WORK_DIR RG_CONSUMER_SOURCE_DIR RG_GENERATOR RG_INCLUDEDIR)
  if(NOT DEFINED ${_v} OR "${${_v}}" STREQUAL "")
    message(FATAL_ERROR "install_consumer: ${_v} is not set by ${RG_PARAMS}")
  endif()
endforeach()

set(prefix "${RG_WORK_DIR}/prefix")
set(consumer_build "${RG_WORK_DIR}/build")
set(config_args "")
if(RG_CONFIG)
  set(config_args --config "${RG_CONFIG}")
endif()

# A DESTDIR in the environment would put the files somewhere else than --prefix.
unset(ENV{DESTDIR})

function(rg_step what)
  message(STATUS "install_consumer: ${what}")
  execute_process(COMMAND ${ARGN} COMMAND_ECHO STDOUT RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install_consumer: ${what} failed (${rc})")
  endif()
endfunction()

file(REMOVE_RECURSE "${RG_WORK_DIR}")
file(MAKE_DIRECTORY "${RG_WORK_DIR}")

# --- 1. install --------------------------------------------------------------------------------------------
rg_step("install ${RG_BUILD_DIR} into ${prefix}"
  "${CMAKE_COMMAND}" --install "${RG_BUILD_DIR}" --prefix "${prefix}" ${config_args})

# --- 2. check what was installed -----------------------------------------------------------------------
file(GLOB_RECURSE config_files "${prefix}/*/ringguardConfig.cmake")
list(LENGTH config_files n_config)
if(NOT n_config EQUAL 1)
  message(FATAL_ERROR "install_consumer: expected one ringguardConfig.cmake under ${prefix}, found: ${config_files}")
endif()
get_filename_component(config_dir "${config_files}" DIRECTORY)
foreach(f IN ITEMS ringguardConfigVersion.cmake ringguardTargets.cmake)
  if(NOT EXISTS "${config_dir}/${f}")
    message(FATAL_ERROR "install_consumer: ${config_dir}/${f} was not installed")
  endif()
endforeach()
foreach(h IN ITEMS core/crc32.h core/types.h core/log.h runtime/communicator.h runtime/factories.h
                  bootstrap/bootstrap.h observability/observability.h)
  file(GLOB_RECURSE found "${prefix}/*/ringguard/${h}")
  if(NOT found)
    message(FATAL_ERROR "install_consumer: header ringguard/${h} was not installed under ${prefix}")
  endif()
endforeach()
# The API only: no torch-layer headers (their libraries are not exported), and no installed header includes
# a private header (src/<layer>/) or a third-party one (spdlog, fmt, MPI, CUDA, NCCL): check_headers.cmake.
# The consumer then compiles each installed header on its own (consumer/CMakeLists.txt).
file(GLOB_RECURSE torch_headers "${prefix}/*/ringguard/torch/*")
if(torch_headers)
  message(FATAL_ERROR "install_consumer: torch-layer headers were installed without a library: ${torch_headers}")
endif()
include("${CMAKE_CURRENT_LIST_DIR}/check_headers.cmake")
rg_check_api_headers("${prefix}/${RG_INCLUDEDIR}" header_errors)
if(header_errors)
  string(REPLACE ";" "\n  " header_errors "${header_errors}")
  message(FATAL_ERROR "install_consumer: installed headers include more than the API:\n  ${header_errors}")
endif()
# The installed CMake files must not point back into the source or build tree.
file(GLOB installed_cmake_files "${config_dir}/*.cmake")
foreach(f IN LISTS installed_cmake_files)
  file(READ "${f}" text)
  foreach(tree IN ITEMS "${RG_SOURCE_DIR}" "${RG_BUILD_DIR}")
    string(FIND "${text}" "${tree}/" pos)
    if(NOT pos EQUAL -1)
      message(FATAL_ERROR "install_consumer: ${f} references ${tree}; the installed package is not self-contained")
    endif()
  endforeach()
endforeach()
# Everything must have landed under the prefix (an install(... DESTINATION /absolute) would escape it).
if(EXISTS "${RG_BUILD_DIR}/install_manifest.txt")
  file(STRINGS "${RG_BUILD_DIR}/install_manifest.txt" installed)
  foreach(f IN LISTS installed)
    cmake_path(IS_PREFIX prefix "${f}" NORMALIZE inside)
    if(NOT inside)
      message(FATAL_ERROR "install_consumer: ${f} was installed outside the --prefix ${prefix}")
    endif()
  endforeach()
endif()

# --- 3. configure + build the consumer -------------------------------------------------------------------
set(prefix_path "${prefix}")
if(RG_PARENT_PREFIX_PATH)
  list(APPEND prefix_path ${RG_PARENT_PREFIX_PATH})
endif()
set(build_type_arg "")
if(RG_CONFIG)
  set(build_type_arg "-DCMAKE_BUILD_TYPE=${RG_CONFIG}")
endif()
rg_step("configure the consumer"
  "${CMAKE_COMMAND}" -S "${RG_CONSUMER_SOURCE_DIR}" -B "${consumer_build}" -G "${RG_GENERATOR}"
  --no-warn-unused-cli
  "-DCMAKE_PREFIX_PATH=${prefix_path}"
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
  "-DRG_EXPECTED_PREFIX=${prefix}"
  ${build_type_arg}
  ${RG_CONSUMER_ARGS})
rg_step("build the consumer" "${CMAKE_COMMAND}" --build "${consumer_build}" ${config_args})

# --- 4. run it -----------------------------------------------------------------------------------------
set(path_file "${consumer_build}/consumer-path-${RG_CONFIG}.txt")
if(NOT EXISTS "${path_file}")
  message(FATAL_ERROR "install_consumer: ${path_file} was not generated by the consumer configure")
endif()
file(READ "${path_file}" consumer_exe)
string(STRIP "${consumer_exe}" consumer_exe)
message(STATUS "install_consumer: run ${consumer_exe}")
execute_process(COMMAND "${consumer_exe}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "install_consumer: the consumer exited with ${rc}")
endif()
if(NOT out MATCHES "0xCBF43926")
  message(FATAL_ERROR "install_consumer: the consumer did not print the expected CRC")
endif()
# The consumer of ringguard::runtime alone.
file(READ "${consumer_build}/consumer-runtime-path-${RG_CONFIG}.txt" runtime_exe)
string(STRIP "${runtime_exe}" runtime_exe)
message(STATUS "install_consumer: run ${runtime_exe}")
execute_process(COMMAND "${runtime_exe}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message("${out}")
if(NOT rc EQUAL 0 OR NOT out MATCHES "returned the bootstrap's error")
  message(FATAL_ERROR "install_consumer: the runtime consumer exited with ${rc}")
endif()
message(STATUS "install_consumer: passed")
