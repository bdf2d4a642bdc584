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
# TensorBoard event files and ONNX models: libprotobuf + protoc (Debian libprotobuf-dev,
# protobuf-compiler); CMake's FindProtobuf provides protobuf::libprotobuf and protobuf_generate().
find_package(Protobuf REQUIRED)
find_package(dnnl CONFIG REQUIRED)   # Debian's config needs ocl-icd-opencl-dev
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(GTest)
# Encoded training images (io/image.cpp, io/jpeg_region.cpp): libjpeg-turbo's libjpeg API (its
# partial decompression: jpeg_skip_scanlines, jpeg_crop_scanline) and libpng (Debian
# libjpeg62-turbo-dev, libpng-dev).
find_package(PkgConfig REQUIRED)
pkg_check_modules(LIBJPEG REQUIRED IMPORTED_TARGET libjpeg)
pkg_check_modules(LIBPNG REQUIRED IMPORTED_TARGET libpng)

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
    # Python wheels (nvidia-cudnn-cu13, nvidia-nccl-cu13) ship only the versioned names.
    find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 HINTS ${CUDAToolkit_LIBRARY_DIR})
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${CUDAToolkit_LIBRARY_DIR})
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
      set(_dtrain_no_cuda "nvcc found but cuDNN or NCCL missing (cudnn.h: ${CUDNN_INCLUDE_DIR}, "
          "libcudnn: ${CUDNN_LIBRARY}, nccl.h: ${NCCL_INCLUDE_DIR}, libnccl: ${NCCL_LIBRARY})")
    endif()
  else()
    set(_dtrain_no_cuda "no CUDA compiler (nvcc) found; set CMAKE_CUDA_COMPILER or put nvcc on PATH")
  endif()
endif()
if(NOT DTRAIN_HAVE_CUDA)
  if(NOT DTRAIN_WITH_CUDA)
    set(_dtrain_no_cuda "DTRAIN_WITH_CUDA=OFF")
  endif()
  if(DTRAIN_REQUIRE_CUDA)
    message(FATAL_ERROR "dtrain: -DDTRAIN_REQUIRE_CUDA=ON but the CUDA backend cannot be built: "
            ${_dtrain_no_cuda})
  endif()
  message(STATUS "dtrain: CPU-only build: " ${_dtrain_no_cuda})
endif()
