#include "server/hosts/completion_check.h"

#include <algorithm>
#include <optional>
#include <span>
#include <string>

#include "common/checked_math.h"

namespace es {
namespace {

Status Invalid(const std::string& what) { return Status::Internal("invalid completion: " + what); }

// Rank and fixed dims against the declared shape (-1: any size).
Status CheckDeclaredShape(const ipc::TensorDesc& t, const std::vector<int64_t>& declared, const std::string& where) {
  if (t.ndim != declared.size()) {
    return Invalid(where + "rank " + std::to_string(t.ndim) + ", the model declares " +
                   std::to_string(declared.size()));
  }
  for (size_t d = 0; d < declared.size(); ++d) {
    if (declared[d] >= 0 && t.dims[d] != declared[d]) {
      return Invalid(where + "dim " + std::to_string(d) + " is " + std::to_string(t.dims[d]) +
                     ", the model declares " + std::to_string(declared[d]));
    }
  }
  return Status::Ok();
}

// The bytes of the shape with each zero dim taken as one, or nullopt on
// overflow. An empty tensor ([2^62, 0]: no bytes) still says how many rows
// it has, and the router builds from that (a row of uncertainty outputs per
// rows of the combined answer, a loop per row of a packed member's split),
// so its other dims must fit the output region too.
std::optional<uint64_t> ExtentBytes(const ipc::TensorDesc& t, uint64_t item_size) {
  uint64_t bytes = item_size;
  for (size_t d = 0; d < t.ndim; ++d) {
    const auto next = CheckedMul(bytes, std::max<uint64_t>(static_cast<uint64_t>(t.dims[d]), 1));
    if (!next) return std::nullopt;
    bytes = *next;
  }
  return bytes;
}

Status CheckOutput(const ipc::TensorDesc& t, size_t index, DataType declared, const Reservation& r) {
  const std::string where = "output " + std::to_string(index) + ": ";
  if (t.datatype != static_cast<uint32_t>(declared)) {
    return Invalid(where + "datatype " + std::to_string(t.datatype) + " is not the declared " +
                   DataTypeName(declared));
  }
  if (t.ndim > ipc::kMaxDims) return Invalid(where + "rank " + std::to_string(t.ndim) + " exceeds the limit");
  if (index < r.output_dims.size()) ES_RETURN_IF_ERROR(CheckDeclaredShape(t, r.output_dims[index], where));
  const auto bytes = TensorBytes(std::span<const int64_t>(t.dims, t.ndim), DataTypeSize(declared));
  if (!bytes) return Invalid(where + "a negative dimension, or a shape whose size overflows");
  if (*bytes != t.bytes) {
    return Invalid(where + std::to_string(t.bytes) + " bytes for a shape of " + std::to_string(*bytes));
  }
  // Dims are not negative here (TensorBytes refused them).
  if (const auto extent = ExtentBytes(t, DataTypeSize(declared)); !extent || *extent > r.output_capacity) {
    return Invalid(where +
                   "a shape whose dims, its zero dims taken as 1, describe more than the request's output "
                   "region holds (" +
                   std::to_string(r.output_capacity) + " bytes)");
  }
  if (!RangeInside(t.offset, t.bytes, r.output_offset, r.output_capacity)) {
    return Invalid(where + "[" + std::to_string(t.offset) + ", +" + std::to_string(t.bytes) +
                   ") lies outside the request's output region [" + std::to_string(r.output_offset) + ", +" +
                   std::to_string(r.output_capacity) + ")");
  }
  return Status::Ok();
}

}  // namespace

bool KnownStatusCode(uint32_t code) { return code <= static_cast<uint32_t>(StatusCode::kDataLoss); }

Status CheckCompletion(const ipc::CompletionDesc& completion, const Reservation& reservation) {
  if (!KnownStatusCode(completion.status_code)) {
    return Invalid("status code " + std::to_string(completion.status_code) + " is not a known code");
  }
  if (completion.status_code != 0) return Status::Ok();
  const size_t declared = reservation.output_types.size();
  if (completion.num_outputs != declared || declared > ipc::kMaxTensors) {
    return Invalid(std::to_string(completion.num_outputs) + " output(s), the model declares " +
                   std::to_string(declared));
  }
  for (size_t i = 0; i < declared; ++i) {
    ES_RETURN_IF_ERROR(CheckOutput(completion.outputs[i], i, reservation.output_types[i], reservation));
  }
  return Status::Ok();
}

}  // namespace es
