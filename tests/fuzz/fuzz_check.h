// FUZZ_CHECK: the fuzz targets' invariant check. Unlike assert() it is never
// compiled out (the fuzz build is optimised, NDEBUG may be set); a failure
// prints what broke and aborts, which libFuzzer reports as a crash and saves
// the input as a reproducer.
#pragma once

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond, ...)                                                   \
  do {                                                                          \
    if (!(cond)) {                                                              \
      std::fprintf(stderr, "FUZZ_CHECK failed at %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                        \
      std::fputc('\n', stderr);                                                 \
      std::abort();                                                             \
    }                                                                           \
  } while (0)
