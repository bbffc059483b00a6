# The memory allocator of the router, the model hosts and the trainer (ES_ALLOCATOR).
#
#   auto      tcmalloc where it is installed (libgoogle-perftools-dev), else
#             the C library's malloc (the default)
#   tcmalloc  gperftools' tcmalloc_minimal; a configure error without it
#   system    the C library's malloc (each program keeps freed blocks up to
#             32 MiB then: common/allocator.h)
#
# Why: a request through the router allocates and frees dozens of small
# blocks (gRPC's call arena, the decoded request, one completion record and
# answer per member call) and, at large batches, blocks of hundreds of KB
# that glibc most likely hands back to the kernel and faults in again.
# With tcmalloc the router spent about half the CPU per 64-row request of
# the demo ensemble, and 9-22% less at batch 1 with many member calls or
# calls in flight (benchmarks/RESULTS.md, "Overhead"); each ensemble-train
# rank held about 120 MB less at its peak, its steps no slower
# (docs/architecture.md, "The allocator").
# Linked, not preloaded, so that a package, a container and a test all run
# the allocator that was measured; the binaries log which one is in use
# (common/allocator.h).
#
# Sanitizer and fuzz builds keep the C library's: they replace malloc
# themselves. Sets ES_ALLOCATOR_IN_USE (tcmalloc or system) for the tests.
set(ES_ALLOCATOR "auto" CACHE STRING "malloc of ensemble-server, ensemble-model-host and ensemble-train: auto, tcmalloc or system")
set_property(CACHE ES_ALLOCATOR PROPERTY STRINGS auto tcmalloc system)
if(NOT ES_ALLOCATOR MATCHES "^(auto|tcmalloc|system)$")
  message(FATAL_ERROR "ES_ALLOCATOR is auto, tcmalloc or system, not '${ES_ALLOCATOR}'")
endif()

set(ES_ALLOCATOR_IN_USE system)
if(ES_ENABLE_ASAN OR ES_ENABLE_TSAN OR ES_ENABLE_FUZZ)
  if(ES_ALLOCATOR STREQUAL "tcmalloc")
    message(FATAL_ERROR "ES_ALLOCATOR=tcmalloc cannot go with a sanitizer build (the sanitizers replace malloc)")
  endif()
elseif(NOT ES_ALLOCATOR STREQUAL "system")
  find_library(ES_TCMALLOC_LIBRARY NAMES tcmalloc_minimal)
  if(ES_TCMALLOC_LIBRARY)
    set(ES_ALLOCATOR_IN_USE tcmalloc)
  elseif(ES_ALLOCATOR STREQUAL "tcmalloc")
    message(FATAL_ERROR "ES_ALLOCATOR=tcmalloc: libtcmalloc_minimal not found (apt-get install libgoogle-perftools-dev)")
  else()
    message(STATUS "ES_ALLOCATOR=auto: no libtcmalloc_minimal, the server, hosts and trainer use the C library's malloc "
                   "(apt-get install libgoogle-perftools-dev for the faster one)")
  endif()
endif()
message(STATUS "allocator of the server, the model hosts and the trainer: ${ES_ALLOCATOR_IN_USE}")

# es_link_allocator(target): links the chosen allocator into an executable.
# --no-as-needed (given before every library; Debian's linker default too):
# the executable names no tcmalloc symbol of its own, and the library must
# stay a dependency for its malloc to take the C library's place. (A
# --push-state/--pop-state pair around the library does not survive CMake's
# reordering of link items.)
function(es_link_allocator target)
  if(ES_ALLOCATOR_IN_USE STREQUAL "tcmalloc")
    target_link_options(${target} PRIVATE "LINKER:--no-as-needed")
    target_link_libraries(${target} PRIVATE "${ES_TCMALLOC_LIBRARY}")
  endif()
endfunction()
