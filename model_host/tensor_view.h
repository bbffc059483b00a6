// TensorView: a non-owning view of one tensor's bytes, e.g. a region of the
// shared-memory arena. Torch-free so that ipc users and the router can share it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/datatype.h"

namespace es {

struct TensorView {
  DataType datatype = DataType::kInvalid;
  std::vector<int64_t> shape;  // full shape, batch dim included
  void* data = nullptr;
  size_t bytes = 0;
};

}  // namespace es
