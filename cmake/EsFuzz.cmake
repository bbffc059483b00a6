# ES_ENABLE_FUZZ: the libFuzzer build (tests/fuzz, scripts/fuzz.sh).
#
# Every object of this build gets libFuzzer's coverage instrumentation
# (fuzzer-no-link) and ASan+UBSan, so the fuzzer is guided by, and catches
# memory errors in, the libraries under test and not just the harness; only
# the fuzz targets link libFuzzer itself (-fsanitize=fuzzer, tests/fuzz).
# UBSan does not recover: undefined behaviour is a crash the fuzzer reports.
# Line tables in any build type: the reports name file and line of each frame.
# Meant for its own build folder with ES_BUILD_TORCH=OFF and benchmarks off.
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "ES_ENABLE_FUZZ needs clang (libFuzzer); configure with CC=clang CXX=clang++ "
                      "(scripts/fuzz.sh does), this is ${CMAKE_CXX_COMPILER_ID}")
endif()
if(ES_ENABLE_ASAN OR ES_ENABLE_TSAN)
  message(FATAL_ERROR "ES_ENABLE_FUZZ brings its own sanitizers (ASan+UBSan); turn ES_ENABLE_ASAN/TSAN off")
endif()
if(ES_BUILD_TORCH)
  message(WARNING "ES_ENABLE_FUZZ: no fuzz target needs LibTorch; -DES_BUILD_TORCH=OFF saves configuring it")
endif()
add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
                    -fno-omit-frame-pointer -gline-tables-only)
add_link_options(-fsanitize=address,undefined)
