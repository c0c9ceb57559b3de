# Every dependency comes from the distribution and is found here; nothing is vendored.
# RINGGUARD_WITH_{CUDA,NCCL,MPI,TORCH} default to ON when the dependency is found, OFF otherwise.
include(CheckLanguage)
find_package(PkgConfig)

find_package(Threads REQUIRED)
find_package(spdlog REQUIRED)
find_package(Boost REQUIRED)           # header-only Boost.CRC: the reference CRC in tests
find_package(nlohmann_json REQUIRED)
find_package(CLI11 QUIET CONFIG)
if(NOT CLI11_FOUND)
  find_path(CLI11_INCLUDE_DIR CLI/CLI.hpp REQUIRED)
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
  target_include_directories(CLI11::CLI11 INTERFACE ${CLI11_INCLUDE_DIR})
endif()

# Host CRC backend: ISA-L (crc32_gzip_refl) when present, zlib's crc32 otherwise.
find_path(ISAL_INCLUDE_DIR isa-l/crc.h)
find_library(ISAL_LIBRARY isal)
if(ISAL_INCLUDE_DIR AND ISAL_LIBRARY)
  set(RINGGUARD_CRC_BACKEND "isa-l")
else()
  find_package(ZLIB REQUIRED)
  set(RINGGUARD_CRC_BACKEND "zlib")
endif()
find_package(ZLIB QUIET)  # tests compare the combine math against zlib's crc32_combine

find_package(GTest QUIET)

find_package(MPI QUIET COMPONENTS C)
check_language(CUDA)
find_package(CUDAToolkit QUIET)
# libtorch: from the installed torch Python package (torch.utils.cmake_prefix_path), never a separate
# download. Only when RINGGUARD_WITH_TORCH is not explicitly OFF, since its CMake config is slow.
if(NOT DEFINED RINGGUARD_WITH_TORCH OR RINGGUARD_WITH_TORCH)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND AND NOT Torch_DIR)
    execute_process(
      COMMAND ${Python3_EXECUTABLE} -c "import torch, sys; sys.stdout.write(torch.utils.cmake_prefix_path)"
      OUTPUT_VARIABLE _rg_torch_prefix RESULT_VARIABLE _rg_torch_rc ERROR_QUIET)
    if(_rg_torch_rc EQUAL 0)
      list(APPEND CMAKE_PREFIX_PATH ${_rg_torch_prefix})
    endif()
  endif()
  # Torch's config appends its own -gencode list (sm_50 .. sm_120a) to CMAKE_CUDA_FLAGS, which CUDA 13
  # rejects and which would override our architectures: keep our flags.
  set(_rg_cuda_flags "${CMAKE_CUDA_FLAGS}")
  find_package(Torch QUIET)
  set(CMAKE_CUDA_FLAGS "${_rg_cuda_flags}")
endif()

# NCCL: the one torch loads (the nvidia-nccl wheel) when torch is there, so a process that imports torch and
# ringguard holds one libnccl.so.2; else the toolkit's or the system's.
set(RINGGUARD_NCCL_SOURCE "toolkit/system")
if(Torch_FOUND AND Python3_Interpreter_FOUND AND NOT NCCL_LIBRARY)
  execute_process(
    COMMAND ${Python3_EXECUTABLE} -c "import nvidia.nccl, sys; sys.stdout.write(list(nvidia.nccl.__path__)[0])"
    OUTPUT_VARIABLE _rg_torch_nccl RESULT_VARIABLE _rg_torch_nccl_rc ERROR_QUIET)
  if(_rg_torch_nccl_rc EQUAL 0 AND EXISTS "${_rg_torch_nccl}/include/nccl.h")
    find_path(NCCL_INCLUDE_DIR nccl.h PATHS "${_rg_torch_nccl}/include" NO_DEFAULT_PATH)
    find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 PATHS "${_rg_torch_nccl}/lib" NO_DEFAULT_PATH)
    if(NCCL_LIBRARY)
      set(RINGGUARD_NCCL_SOURCE "torch (${_rg_torch_nccl})")
    endif()
  endif()
endif()
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)

set(_rg_cuda_found OFF)
if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND)
  set(_rg_cuda_found ON)
endif()
set(_rg_nccl_found OFF)
if(_rg_cuda_found AND NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
  set(_rg_nccl_found ON)
endif()

option(RINGGUARD_WITH_MPI "Build the MPI transport" ${MPI_C_FOUND})
option(RINGGUARD_WITH_CUDA "Build the CUDA kernels and memory pool" ${_rg_cuda_found})
option(RINGGUARD_WITH_NCCL "Build the NCCL transport" ${_rg_nccl_found})
option(RINGGUARD_WITH_TORCH "Build the torch integration" ${Torch_FOUND})

if(RINGGUARD_WITH_MPI AND NOT MPI_C_FOUND)
  message(FATAL_ERROR "RINGGUARD_WITH_MPI=ON but MPI was not found (apt-get install libopenmpi-dev openmpi-bin)")
endif()
if(RINGGUARD_WITH_NCCL AND NOT RINGGUARD_WITH_CUDA)
  message(STATUS "RINGGUARD_WITH_NCCL needs RINGGUARD_WITH_CUDA: turning NCCL off")
  set(RINGGUARD_WITH_NCCL OFF CACHE BOOL "Build the NCCL transport" FORCE)
endif()
if(RINGGUARD_WITH_CUDA)
  if(NOT _rg_cuda_found)
    message(FATAL_ERROR "RINGGUARD_WITH_CUDA=ON but no CUDA compiler/toolkit was found")
  endif()
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80 90)
  endif()
  enable_language(CUDA)
endif()
