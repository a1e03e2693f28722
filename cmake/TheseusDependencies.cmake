# Third-party dependencies, all from Debian packages (scripts/setup-deps.sh installs them).
find_package(Threads REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
# tinyxml2 (MSCCL XML import) is optional: without it the import reports that it
# is unavailable. scripts/setup-deps.sh installs it on Debian.
option(THESEUS_WITH_TINYXML2 "Use tinyxml2 when found (MSCCL XML import)" ON)
set(THESEUS_HAVE_TINYXML2 ON)
if(THESEUS_WITH_TINYXML2)
  find_package(tinyxml2 QUIET CONFIG)
endif()
if(NOT THESEUS_WITH_TINYXML2)
  set(THESEUS_HAVE_TINYXML2 OFF)
  add_library(tinyxml2::tinyxml2 INTERFACE IMPORTED)
elseif(NOT tinyxml2_FOUND)
  find_library(TINYXML2_LIB tinyxml2)
  find_path(TINYXML2_INCLUDE tinyxml2.h)
  if(TINYXML2_LIB AND TINYXML2_INCLUDE)
    add_library(tinyxml2::tinyxml2 UNKNOWN IMPORTED)
    set_target_properties(tinyxml2::tinyxml2 PROPERTIES IMPORTED_LOCATION ${TINYXML2_LIB}
                          INTERFACE_INCLUDE_DIRECTORIES ${TINYXML2_INCLUDE})
  else()
    set(THESEUS_HAVE_TINYXML2 OFF)
    add_library(tinyxml2::tinyxml2 INTERFACE IMPORTED)
    message(WARNING "tinyxml2 not found: MSCCL XML import is disabled (install libtinyxml2-dev)")
  endif()
endif()

# hwloc (libhwloc-dev) reads the host topology (GPUs, NICs, NUMA nodes) in its own library,
# libtheseus-topo-hwloc.so; without it Theseus chooses NICs without the topology and says so.
find_package(PkgConfig QUIET)
set(THESEUS_HAVE_HWLOC OFF)
if(PkgConfig_FOUND)
  pkg_check_modules(HWLOC QUIET IMPORTED_TARGET hwloc)
  if(HWLOC_FOUND)
    set(THESEUS_HAVE_HWLOC ON)
  endif()
endif()
if(NOT THESEUS_HAVE_HWLOC)
  message(WARNING "hwloc not found: no topology reader (install libhwloc-dev)")
endif()

# MPI is optional: it builds the OpenMPI comparison program and mpirun support in the harness.
find_package(MPI COMPONENTS C CXX QUIET)

# CUDA is optional. The runtime is linked statically so the library loads without a driver.
set(THESEUS_HAVE_CUDA OFF)
if(NOT THESEUS_CUDA STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    include(CheckLanguage)
    check_language(CUDA)
    if(CMAKE_CUDA_COMPILER)
      set(THESEUS_HAVE_CUDA ON)
      if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
        # Hopper (H100/H200) code plus PTX the driver compiles for newer parts.
        set(CMAKE_CUDA_ARCHITECTURES 90-real 90-virtual)
      endif()
      enable_language(CUDA)
      # CMake 3.25 does not know nvcc's C++20 flag; the device interpreter needs C++20 (it maps CXX_STANDARD 20
      # to the CUDA dialect of targets with .cu sources).
      set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
      set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
      list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
      set(CMAKE_CUDA_STANDARD 20)
    endif()
  endif()
  if(THESEUS_CUDA STREQUAL "ON" AND NOT THESEUS_HAVE_CUDA)
    message(FATAL_ERROR "THESEUS_CUDA=ON but no CUDA toolkit/nvcc was found")
  endif()
endif()
message(STATUS "Theseus: CUDA parts ${THESEUS_HAVE_CUDA}; MPI ${MPI_CXX_FOUND}")

# The reference NCCL (for ABI tests), shipped with the CUDA toolkit on dev machines.
find_path(THESEUS_REF_NCCL_INCLUDE nccl.h PATHS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include NO_DEFAULT_PATH)
find_library(THESEUS_REF_NCCL_LIB NAMES libnccl.so.2 nccl PATHS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib /usr/local/cuda/lib64 NO_DEFAULT_PATH)

# The IB network (src/transport/ib) compiles against rdma-core's <infiniband/verbs.h>
# (libibverbs-dev) and loads libibverbs.so.1 at run time, so libnccl.so.2 runs without it.
find_path(THESEUS_VERBS_INCLUDE_DIR infiniband/verbs.h)
if(NOT THESEUS_VERBS_INCLUDE_DIR)
  message(FATAL_ERROR "infiniband/verbs.h not found: install libibverbs-dev (scripts/setup-deps.sh does)")
endif()
