# es_set_warnings(target): the one place that decides the project's warnings.
function(es_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic
    -Wno-unused-parameter -Werror=return-type)
endfunction()
