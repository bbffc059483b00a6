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

# ASan's build and the fuzz build in RelWithDebInfo compile at -O1 with line
# tables only (OSS-Fuzz's flags), unless CMAKE_<LANG>_FLAGS_RELWITHDEBINFO was
# set to something else: a report needs each frame's file and line, not full
# debug info, and clang 14 compiles the router's sources so a fifth to a
# quarter faster than with CMake's -O2 -g. TSan's keeps -O2 -g: with line
# tables only an inlined frame is named without its namespace ("Run", not
# grpc::internal::CallbackWithSuccessTag::Run), so tests/tsan.supp's
# race_top:^grpc:: entries no longer matched gRPC's own header code.
if(ES_ENABLE_ASAN OR ES_ENABLE_FUZZ)
  foreach(lang C CXX)
    if(CMAKE_${lang}_FLAGS_RELWITHDEBINFO STREQUAL "-O2 -g -DNDEBUG")
      if(CMAKE_${lang}_COMPILER_ID MATCHES "Clang")
        set(CMAKE_${lang}_FLAGS_RELWITHDEBINFO "-O1 -gline-tables-only -DNDEBUG")
      else()
        set(CMAKE_${lang}_FLAGS_RELWITHDEBINFO "-O1 -g1 -DNDEBUG")  # gcc's name for line tables only
      endif()
    endif()
  endforeach()
endif()
