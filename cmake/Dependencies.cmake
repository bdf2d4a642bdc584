# Finds dtrain's dependencies (all from Debian packages; CUDA from /usr/local/cuda when present).
# Each becomes an imported target; the CUDA backend is enabled only when nvcc, cuDNN and NCCL are all found.

find_package(MPI REQUIRED COMPONENTS C CXX)
set(MPI_CXX_SKIP_MPICXX ON)

# Debian's parallel HDF5 (openmpi flavour) lives under its own prefix.
set(HDF5_PREFER_PARALLEL TRUE)
if(NOT DEFINED HDF5_ROOT AND EXISTS /usr/lib/x86_64-linux-gnu/hdf5/openmpi)
  set(HDF5_ROOT /usr/lib/x86_64-linux-gnu/hdf5/openmpi)
endif()
find_package(HDF5 REQUIRED COMPONENTS C)
if(NOT HDF5_IS_PARALLEL)
  message(WARNING "HDF5 is not the parallel (MPI) build; install libhdf5-openmpi-dev")
endif()
add_library(dtrain_hdf5 INTERFACE)
target_include_directories(dtrain_hdf5 SYSTEM INTERFACE ${HDF5_C_INCLUDE_DIRS} ${HDF5_INCLUDE_DIRS})
target_link_libraries(dtrain_hdf5 INTERFACE ${HDF5_C_LIBRARIES} ${HDF5_LIBRARIES})
target_compile_definitions(dtrain_hdf5 INTERFACE ${HDF5_C_DEFINITIONS} ${HDF5_DEFINITIONS})

find_package(Boost REQUIRED COMPONENTS program_options)   # also Boost.CRC (header-only)
# TensorBoard event files: libprotobuf + protoc (Debian libprotobuf-dev, protobuf-compiler);
# CMake's FindProtobuf provides protobuf::libprotobuf and protobuf_generate().
find_package(Protobuf REQUIRED)
find_package(dnnl CONFIG REQUIRED)   # Debian's config needs ocl-icd-opencl-dev
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(GTest)

set(DTRAIN_HAVE_CUDA OFF)
if(DTRAIN_WITH_CUDA)
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 80 86 89 90)
    endif()
    enable_language(CUDA)
    set(CMAKE_CUDA_STANDARD 17)
    find_package(CUDAToolkit REQUIRED)
    find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    find_library(CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR})
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
    if(CUDNN_INCLUDE_DIR AND CUDNN_LIBRARY AND NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
      add_library(dtrain_cudnn UNKNOWN IMPORTED)
      set_target_properties(dtrain_cudnn PROPERTIES IMPORTED_LOCATION ${CUDNN_LIBRARY}
                            INTERFACE_INCLUDE_DIRECTORIES ${CUDNN_INCLUDE_DIR})
      add_library(dtrain_nccl UNKNOWN IMPORTED)
      set_target_properties(dtrain_nccl PROPERTIES IMPORTED_LOCATION ${NCCL_LIBRARY}
                            INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})
      set(DTRAIN_HAVE_CUDA ON)
      message(STATUS "dtrain: CUDA backend enabled (archs ${CMAKE_CUDA_ARCHITECTURES})")
    else()
      message(STATUS "dtrain: nvcc found but cuDNN or NCCL missing; CPU-only build")
    endif()
  else()
    message(STATUS "dtrain: no CUDA compiler; CPU-only build")
  endif()
endif()
