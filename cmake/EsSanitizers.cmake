# Sanitizer options: ASan+UBSan or TSan, never both (they cannot share a process).
if(ES_ENABLE_ASAN AND ES_ENABLE_TSAN)
  message(FATAL_ERROR "ES_ENABLE_ASAN and ES_ENABLE_TSAN cannot both be ON")
endif()
if(ES_ENABLE_ASAN)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()
if(ES_ENABLE_TSAN)
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
endif()

# In RelWithDebInfo, unless CMAKE_<LANG>_FLAGS_RELWITHDEBINFO was set to
# something else, the ASan and TSan builds compile without optimisation and
# the fuzz build at -O1 (OSS-Fuzz's flags). The optimiser was most of these
# builds' time under the sanitizers' instrumentation; measured with clang 14
# on the 2-core EPYC, ASan+UBSan at -O0 against -O1: http_server.cc 26 s
# against 82, grpc_service.pb.cc 7 against 31, host_supervisor.cc 3.4
# against 7.6; TSan at -O0 against -O2: http_server.cc 21 against 58,
# router.cc 8.6 against 14.0; ASan's whole build 172 s against about 380,
# TSan's 167 against about 250. A sanitizer finds at -O0 all it finds
# optimised (nothing is optimised away), and the tests these builds run stay
# short (ASan's unit tests 13 s, TSan's 11; TSan's isolation test 36 s, as
# at -O2). The fuzz build keeps -O1: its seconds per target are a search,
# and an unoptimised target tries fewer inputs in them.
# Debug information: ASan's and the fuzz build's line tables only (a report
# needs each frame's file and line, not full debug info); TSan's full (-g):
# with line tables only an inlined frame is named without its namespace
# ("Run", not grpc::internal::CallbackWithSuccessTag::Run), so
# tests/tsan.supp's race_top:^grpc:: entries no longer matched gRPC's own
# header code.
if(ES_ENABLE_ASAN OR ES_ENABLE_TSAN OR ES_ENABLE_FUZZ)
  if(ES_ENABLE_FUZZ)
    set(_es_level -O1)
  else()
    set(_es_level -O0)
  endif()
  foreach(lang C CXX)
    if(CMAKE_${lang}_FLAGS_RELWITHDEBINFO STREQUAL "-O2 -g -DNDEBUG")
      if(ES_ENABLE_TSAN)
        set(_es_debug -g)
      elseif(CMAKE_${lang}_COMPILER_ID MATCHES "Clang")
        set(_es_debug -gline-tables-only)
      else()
        set(_es_debug -g1)  # gcc's name for line tables only
      endif()
      set(CMAKE_${lang}_FLAGS_RELWITHDEBINFO "${_es_level} ${_es_debug} -DNDEBUG")
    endif()
  endforeach()
endif()
