// InferParameterJson: a KServe v2 InferParameter as the JSON value the HTTP/REST
// protocol carries (a bool, a number or a string), the one mapping both the
// HTTP front end's answers and the HTTP client's requests use. Header-only:
// the JSON library is header-only too, and this is all either side needs.
#pragma once

#include <nlohmann/json.hpp>

#include "proto/grpc_service.pb.h"

namespace es {

// null for a parameter with no value set.
inline nlohmann::json InferParameterJson(const inference::InferParameter& p) {
  switch (p.parameter_choice_case()) {
    case inference::InferParameter::kBoolParam:
      return p.bool_param();
    case inference::InferParameter::kInt64Param:
      return p.int64_param();
    case inference::InferParameter::kUint64Param:
      return p.uint64_param();
    case inference::InferParameter::kDoubleParam:
      return p.double_param();
    case inference::InferParameter::kStringParam:
      return p.string_param();
    default:
      return nullptr;
  }
}

}  // namespace es
