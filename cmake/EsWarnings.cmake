# es_set_warnings(target): the one place that decides the project's warnings.
#
# Under clang, also the thread-safety analysis: members marked
# ABSL_GUARDED_BY and functions marked ABSL_EXCLUSIVE_LOCKS_REQUIRED (see
# common/mutex.h) are checked at compile time, and a violation is an error.
# gcc has no such analysis (the annotations expand to nothing there).
# -Wshadow: a local that hides another local is how a lock guard or a status
# ends up guarding or checking the wrong thing. gcc's -Wshadow also flags
# every constructor parameter named like a plain struct's field, the usual
# way to write such constructors, so gcc gets -Wshadow=local; clang's
# -Wshadow does not flag those.
#
# ES_WERROR (CI's builds, scripts/test.sh): every warning is an error. Off
# for users, whose newer compilers may warn about things ours do not.
option(ES_WERROR "Treat warnings as errors (CI)" OFF)
function(es_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic
    -Wno-unused-parameter -Werror=return-type)
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    target_compile_options(${target} PRIVATE -Wshadow)
  else()
    target_compile_options(${target} PRIVATE -Wshadow=local)
  endif()
  if(ES_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    target_compile_options(${target} PRIVATE -Wthread-safety -Werror=thread-safety)
  endif()
endfunction()
