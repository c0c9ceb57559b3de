# Installs the public headers and the layer targets, and generates the CMake package so that a consumer
# can do
#   find_package(ringguard CONFIG REQUIRED)
#   target_link_libraries(app PRIVATE ringguard::ringguard)
#
# Included at the end of the top-level CMakeLists.txt, after add_subdirectory(src), which sets
# RINGGUARD_LAYER_TARGETS (PARENT_SCOPE): ringguard_core, ringguard_transport, ringguard_algorithms,
# ringguard_bootstrap, ringguard_runtime, ..., [ringguard_mpi], [ringguard_cuda], [ringguard_device], and the
# INTERFACE umbrella `ringguard`.

set(RINGGUARD_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/ringguard"
    CACHE STRING "Where ringguardConfig.cmake is installed (relative to the prefix)")

if(NOT RINGGUARD_LAYER_TARGETS)
  message(FATAL_ERROR "ringguard_install: RINGGUARD_LAYER_TARGETS is empty; src/CMakeLists.txt must set it "
                      "with PARENT_SCOPE before cmake/ringguard_install.cmake is included")
endif()
foreach(_rg_t IN LISTS RINGGUARD_LAYER_TARGETS)
  if(NOT TARGET ${_rg_t})
    message(FATAL_ERROR "ringguard_install: '${_rg_t}' in RINGGUARD_LAYER_TARGETS is not a target")
  endif()
endforeach()
if(NOT "ringguard" IN_LIST RINGGUARD_LAYER_TARGETS)
  message(FATAL_ERROR "ringguard_install: the umbrella target 'ringguard' is missing from RINGGUARD_LAYER_TARGETS")
endif()

# --- headers -------------------------------------------------------------------------------------------
# The torch layer's headers are not installed: its libraries (ringguard_torch, ringguard_c10d) are not in the
# export set (a consumer would need libtorch's CMake package too); PyTorch users take the Python package.
# Nor the c10d transport's entry (ringguard/transport/c10d_transport.h), which names torch types and is
# linked into ringguard_c10d only.
# Nor, in a package built without MPI, the MPI short forms (ringguard/mpi/,
# ringguard/runtime/mpi_device_communicator.h): their definitions are not in it, so including them should
# fail, not linking.
set(_rg_header_excludes PATTERN "torch" EXCLUDE PATTERN "c10d_transport.h" EXCLUDE)
if(NOT RINGGUARD_WITH_MPI)
  list(APPEND _rg_header_excludes PATTERN "mpi" EXCLUDE PATTERN "mpi_device_communicator.h" EXCLUDE)
endif()
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/ringguard
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  COMPONENT ringguard_development
  FILES_MATCHING
    PATTERN "*.h"
    PATTERN "*.hpp"
    PATTERN "*.cuh"
    PATTERN "*.inl"
    ${_rg_header_excludes})

# --- libraries + export set ----------------------------------------------------------------------------
install(TARGETS ${RINGGUARD_LAYER_TARGETS}
  EXPORT ringguardTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT ringguard_development
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT ringguard_runtime
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT ringguard_runtime)
# (No INCLUDES DESTINATION: ringguard_core carries $<INSTALL_INTERFACE:include> and every layer links it.)

install(EXPORT ringguardTargets
  NAMESPACE ringguard::
  FILE ringguardTargets.cmake
  DESTINATION ${RINGGUARD_INSTALL_CMAKEDIR}
  COMPONENT ringguard_development)

# --- what the exported link interfaces reference -------------------------------------------------------
# The config below always finds Threads and spdlog, and MPI / CUDAToolkit / ZLIB from the build options.
# Scan the exported targets' link interfaces (static libraries carry their private deps as
# $<LINK_ONLY:...>) for any other imported target, so that a new dependency added to a layer either gets a
# find_dependency() here or a configure-time warning instead of a package that fails in the consumer.
set(_rg_known_ns Threads spdlog fmt MPI CUDA ZLIB)  # covered by the fixed part of ringguardConfig.cmake
set(RINGGUARD_CONFIG_EXTRA_DEPENDENCIES "")          # further packages, find_dependency()'d in order
set(_rg_exported_paths "")
foreach(_rg_t IN LISTS RINGGUARD_LAYER_TARGETS)
  get_target_property(_rg_links ${_rg_t} INTERFACE_LINK_LIBRARIES)
  if(NOT _rg_links)
    continue()
  endif()
  foreach(_rg_item IN LISTS _rg_links)
    string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" _rg_item "${_rg_item}")
    if(_rg_item IN_LIST RINGGUARD_LAYER_TARGETS)
      continue()
    endif()
    if(_rg_item MATCHES "^(torch|torch_library|torch_cpu|torch_cuda|c10|c10_cuda)$")
      list(APPEND RINGGUARD_CONFIG_EXTRA_DEPENDENCIES Torch)
    elseif(_rg_item MATCHES "^([A-Za-z0-9_]+)::")
      set(_rg_ns "${CMAKE_MATCH_1}")
      if(_rg_ns STREQUAL "ringguard" OR _rg_ns IN_LIST _rg_known_ns)
        continue()
      elseif(_rg_ns MATCHES "^(Boost|nlohmann_json)$")
        list(APPEND RINGGUARD_CONFIG_EXTRA_DEPENDENCIES ${_rg_ns})
      else()
        message(WARNING "ringguard_install: exported target ${_rg_t} links ${_rg_item}; "
                        "ringguardConfig.cmake does not know which package provides it (add it to "
                        "cmake/ringguard_install.cmake or link it PRIVATE from a non-exported target)")
      endif()
    elseif(IS_ABSOLUTE "${_rg_item}")
      # Linked by path (e.g. ISA-L): usable on this machine; check the path still exists at load time.
      cmake_path(IS_PREFIX PROJECT_BINARY_DIR "${_rg_item}" NORMALIZE _rg_in_build)
      cmake_path(IS_PREFIX PROJECT_SOURCE_DIR "${_rg_item}" NORMALIZE _rg_in_source)
      if(_rg_in_build OR _rg_in_source)
        message(WARNING "ringguard_install: exported target ${_rg_t} links ${_rg_item}, a path inside the "
                        "source/build tree; the installed package will not be relocatable")
      endif()
      list(APPEND _rg_exported_paths "${_rg_item}")
    endif()
  endforeach()
endforeach()
list(REMOVE_DUPLICATES RINGGUARD_CONFIG_EXTRA_DEPENDENCIES)
list(REMOVE_DUPLICATES _rg_exported_paths)
set(RINGGUARD_CONFIG_LINKED_PATHS "${_rg_exported_paths}")

# Normalised ON/OFF values for the config (options may hold TRUE/1/empty).
foreach(_rg_opt MPI CUDA NCCL TORCH)
  if(RINGGUARD_WITH_${_rg_opt})
    set(RINGGUARD_CONFIG_WITH_${_rg_opt} ON)
  else()
    set(RINGGUARD_CONFIG_WITH_${_rg_opt} OFF)
  endif()
endforeach()

# --- ringguardConfig.cmake + ringguardConfigVersion.cmake ----------------------------------------------
configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/ringguardConfig.cmake.in
  ${PROJECT_BINARY_DIR}/ringguardConfig.cmake
  INSTALL_DESTINATION ${RINGGUARD_INSTALL_CMAKEDIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_LIBDIR)
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/ringguardConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMajorVersion)
install(FILES
  ${PROJECT_BINARY_DIR}/ringguardConfig.cmake
  ${PROJECT_BINARY_DIR}/ringguardConfigVersion.cmake
  DESTINATION ${RINGGUARD_INSTALL_CMAKEDIR}
  COMPONENT ringguard_development)

unset(_rg_t)
unset(_rg_links)
unset(_rg_item)
unset(_rg_ns)
unset(_rg_opt)
unset(_rg_in_build)
unset(_rg_in_source)
unset(_rg_known_ns)
unset(_rg_exported_paths)
unset(_rg_header_excludes)
