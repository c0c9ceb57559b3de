# CUDA layer: the kernels (src/cuda/*.cu: CRC-32, NaN scan, verify + apply, trailers), their launchers and the
# device / pinned-host memory pools; it links core alone. Its host planning is ringguard_cuda_plan
# (src/CMakeLists.txt), built without CUDA too; what puts the kernels to work for another layer (the device
# executor, the guard's and the replica check's device backends) is the device layer's (ringguard_device).
# Included from src/CMakeLists.txt when RINGGUARD_WITH_CUDA is ON; appends ringguard_cuda to
# RINGGUARD_LAYER_TARGETS in the including scope.

file(GLOB RINGGUARD_CUDA_KERNEL_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/*.cu
     ${CMAKE_CURRENT_LIST_DIR}/peer/*.cu)  # the one-sided protocol's kernels, one collective per file
add_library(ringguard_cuda STATIC
  ${RINGGUARD_CUDA_KERNEL_SOURCES}
  ${CMAKE_CURRENT_LIST_DIR}/memory_pool.cc
  ${CMAKE_CURRENT_LIST_DIR}/pool_registry.cc  # every pool of the process, beside PyTorch's memory
)
target_link_libraries(ringguard_cuda PUBLIC ringguard_core ringguard_cuda_plan CUDA::cudart)
target_include_directories(ringguard_cuda PRIVATE ${PROJECT_SOURCE_DIR}/src)  # core/logging.h
target_compile_options(ringguard_cuda PRIVATE
  $<$<COMPILE_LANGUAGE:CXX>:${RINGGUARD_WARNINGS}>
  # -Xptxas -v: the resource report regcheck reads (kept out of the build output by nvcc_capture.sh).
  $<$<COMPILE_LANGUAGE:CUDA>:-Xptxas=-v>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wno-unused-parameter>
)
set_target_properties(ringguard_cuda PROPERTIES
  EXPORT_NAME cuda
  CUDA_STANDARD 17
  CUDA_STANDARD_REQUIRED ON
  CUDA_SEPARABLE_COMPILATION OFF
)
# Default to A100 + H100/H200 unless the user chose (CMAKE_CUDA_ARCHITECTURES initialises the property).
if(NOT CMAKE_CUDA_ARCHITECTURES)
  set_target_properties(ringguard_cuda PROPERTIES CUDA_ARCHITECTURES "80;90")
endif()
# Every .cu object goes through nvcc_capture.sh, which saves the ptxas report as <object>.ptxas.log. A
# launcher the user configured (e.g. ccache, which replays the report on cache hits) still runs after it.
set(_rg_cuda_launcher sh ${PROJECT_SOURCE_DIR}/cmake/nvcc_capture.sh ${CMAKE_CUDA_COMPILER_LAUNCHER})
set_target_properties(ringguard_cuda PROPERTIES CUDA_COMPILER_LAUNCHER "${_rg_cuda_launcher}")
# The layer's public entries for the torch layer (ringguard/cuda/device_buffer_pool.h, pool_usage.h).
target_sources(ringguard_cuda PRIVATE ${CMAKE_CURRENT_LIST_DIR}/device_buffer_pool.cc
                                      ${CMAKE_CURRENT_LIST_DIR}/pool_usage.cc)
add_library(ringguard::cuda ALIAS ringguard_cuda)
list(APPEND RINGGUARD_LAYER_TARGETS ringguard_cuda)

# regcheck: fails on any spill or on a kernel above the register budget of its __launch_bounds__, using the
# reports of the normal build (no second compilation). CI runs it wherever nvcc exists; no GPU needed.
find_package(Python3 COMPONENTS Interpreter)
get_target_property(_rg_cuda_archs ringguard_cuda CUDA_ARCHITECTURES)
string(REPLACE ";" "," _rg_cuda_archs "${_rg_cuda_archs}")
if(Python3_Interpreter_FOUND)
  add_custom_target(regcheck
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/regcheck.py
      --archs "${_rg_cuda_archs}"
      --sources ${RINGGUARD_CUDA_KERNEL_SOURCES}
      --logs $<TARGET_OBJECTS:ringguard_cuda>
    COMMENT "Checking kernel registers and spills (ptxas reports of ringguard_cuda)"
    COMMAND_EXPAND_LISTS
    VERBATIM)
else()
  add_custom_target(regcheck
    COMMAND ${CMAKE_COMMAND} -E echo "regcheck needs python3, which was not found"
    COMMAND ${CMAKE_COMMAND} -E false
    VERBATIM)
endif()
add_dependencies(regcheck ringguard_cuda)
