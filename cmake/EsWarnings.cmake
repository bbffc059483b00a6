# es_set_warnings(target): the one place that decides the project's warnings.
#
# Under clang, also the thread-safety analysis: members marked
# ABSL_GUARDED_BY and functions marked ABSL_EXCLUSIVE_LOCKS_REQUIRED (see
# common/mutex.h) are checked at compile time, and a violation is an error.
# gcc has no such analysis (the annotations expand to nothing there).
function(es_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic
    -Wno-unused-parameter -Werror=return-type)
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    target_compile_options(${target} PRIVATE -Wthread-safety -Werror=thread-safety)
  endif()
endfunction()
