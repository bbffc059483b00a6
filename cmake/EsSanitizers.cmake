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

# A sanitizer build (these and ES_ENABLE_FUZZ's) in RelWithDebInfo compiles
# with line tables only, unless CMAKE_<LANG>_FLAGS_RELWITHDEBINFO was set to
# something else: a report needs each frame's file and line, not full debug
# info (OSS-Fuzz builds the same way). ASan's and the fuzz build's also at
# -O1 (OSS-Fuzz's level); clang 14 compiles the router's sources so a fifth to
# a quarter faster than with CMake's -O2 -g. TSan's stays at -O2: at -O1 it
# reported races inside gRPC's own header code (callback_common.h, run by
# gRPC's threads against our completion thread's Finish), synchronised
# inside libgrpc, which TSan does not see; -O2 builds never showed them.
if(ES_ENABLE_ASAN OR ES_ENABLE_TSAN OR ES_ENABLE_FUZZ)
  set(es_sanitizer_level -O1)
  if(ES_ENABLE_TSAN)
    set(es_sanitizer_level -O2)
  endif()
  foreach(lang C CXX)
    if(CMAKE_${lang}_FLAGS_RELWITHDEBINFO STREQUAL "-O2 -g -DNDEBUG")
      if(CMAKE_${lang}_COMPILER_ID MATCHES "Clang")
        set(CMAKE_${lang}_FLAGS_RELWITHDEBINFO "${es_sanitizer_level} -gline-tables-only -DNDEBUG")
      else()
        set(CMAKE_${lang}_FLAGS_RELWITHDEBINFO "${es_sanitizer_level} -g1 -DNDEBUG")  # gcc's name for line tables only
      endif()
    endif()
  endforeach()
endif()
