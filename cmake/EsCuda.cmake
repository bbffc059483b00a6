# The CUDA switches, decided once here (after find_package(Torch)):
#
#   ES_TORCH_CUDA         the LibTorch found is CUDA-enabled: the hosts' CUDA
#                         path (device pinning, per-executor streams, arena
#                         registration) and the trainer's NCCL group compile.
#                         Debian's LibTorch is CPU-only: OFF there.
#   ES_HAVE_CUDA_RUNTIME  the CUDA toolkit's headers and libcudart were found:
#                         model_host/cuda/ (arena registration, pinned staging),
#                         its tests and bench-h2d build, with or without a CUDA
#                         LibTorch. ES_CUDA=AUTO (default) builds them where
#                         the toolkit is found, ON requires it, OFF skips it.
#
# The toolkit is looked for in CUDAToolkit_ROOT, else /usr/local/cuda.
set(ES_CUDA "AUTO" CACHE STRING "CUDA runtime parts: AUTO (where the CUDA toolkit is found), ON, OFF")
set_property(CACHE ES_CUDA PROPERTY STRINGS AUTO ON OFF)

set(ES_TORCH_CUDA OFF)
if(ES_BUILD_TORCH AND (TORCH_CUDA_LIBRARIES OR TARGET torch_cuda OR TARGET c10_cuda))
  set(ES_TORCH_CUDA ON)
endif()

set(ES_HAVE_CUDA_RUNTIME OFF)
if(NOT ES_CUDA STREQUAL "OFF" OR ES_TORCH_CUDA)
  if(NOT DEFINED CUDAToolkit_ROOT AND NOT DEFINED ENV{CUDAToolkit_ROOT} AND EXISTS /usr/local/cuda/include)
    set(CUDAToolkit_ROOT /usr/local/cuda)
  endif()
  if(NOT TARGET CUDA::cudart)  # a CUDA LibTorch has found it already
    find_package(CUDAToolkit QUIET)
  endif()
  if(TARGET CUDA::cudart)
    set(ES_HAVE_CUDA_RUNTIME ON)
  elseif(ES_CUDA STREQUAL "ON" OR ES_TORCH_CUDA)
    message(FATAL_ERROR "ES_CUDA=ON or a CUDA LibTorch, but no CUDA toolkit (headers + libcudart) "
                        "was found; set CUDAToolkit_ROOT")
  endif()
endif()
if(ES_HAVE_CUDA_RUNTIME)
  set(_es_cuda_where " (toolkit ${CUDAToolkit_VERSION} in ${CUDAToolkit_INCLUDE_DIRS})")
endif()
message(STATUS "ensemble-serve: CUDA LibTorch ${ES_TORCH_CUDA}, CUDA runtime parts "
               "${ES_HAVE_CUDA_RUNTIME}${_es_cuda_where}")
