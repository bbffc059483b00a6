// ErrnoText: the system's text for an errno value, safe from any thread.
//
// Contract: ErrnoText(ENOENT) == "No such file or directory" (the C
// library's wording, via std::generic_category); any int is accepted
// ("Unknown error N" for values the system does not know). Unlike
// std::strerror, which may return a buffer shared between threads, it
// returns its own string: use it wherever an errno becomes message text.
#pragma once

#include <string>

namespace es {

std::string ErrnoText(int err);

}  // namespace es
