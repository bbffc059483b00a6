#include "common/errno_text.h"

#include <system_error>

namespace es {

std::string ErrnoText(int err) { return std::error_code(err, std::generic_category()).message(); }

}  // namespace es
