// Fuzz target: es::CheckCompletion, the router's check of a host's
// completion against what it reserved for the request.
//
// Input layout (corpus/completion_check/ seeds are made by make_seeds):
//   8 bytes  reservation.output_offset (little-endian)
//   8 bytes  reservation.output_capacity
//   1 byte   n: number of declared outputs (mod kMaxTensors + 1)
//   n bytes  their datatypes (1 + byte mod 9: BOOL .. FP64)
//   rest     the CompletionDesc's bytes (zero-filled or cut to its size)
//
// The oracle is independent of the code under test (fuzz_math.h, 128-bit,
// not common/checked_math.h): whenever CheckCompletion says OK, a
// success completion has exactly the declared outputs with their datatypes,
// rank <= kMaxDims, no negative dim, bytes == product(dims) * item size, and
// [offset, offset + bytes) inside [output_offset, output_offset +
// output_capacity); an error completion carries a known status code. Any
// input that passes the check but breaks this is a hole in the check.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "server/hosts/completion_check.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_math.h"

namespace {

using u128 = unsigned __int128;

uint64_t Take64(const uint8_t*& data, size_t& size) {
  uint64_t v = 0;
  const size_t n = size < 8 ? size : 8;
  std::memcpy(&v, data, n);
  data += n;
  size -= n;
  return v;
}

void CheckAccepted(const es::ipc::CompletionDesc& c, const es::Reservation& r) {
  if (c.status_code != 0) {
    FUZZ_CHECK(c.status_code <= 15, "status code %u accepted", c.status_code);
    return;
  }
  FUZZ_CHECK(c.num_outputs == r.output_types.size(), "%u outputs accepted, %zu declared", c.num_outputs,
             r.output_types.size());
  FUZZ_CHECK(c.num_outputs <= es::ipc::kMaxTensors, "%u outputs accepted", c.num_outputs);
  const u128 region_begin = r.output_offset;
  const u128 region_end = region_begin + r.output_capacity;
  for (uint32_t i = 0; i < c.num_outputs; ++i) {
    const es::ipc::TensorDesc& t = c.outputs[i];
    FUZZ_CHECK(t.datatype == static_cast<uint32_t>(r.output_types[i]), "output %u: datatype %u accepted, %u declared",
               i, t.datatype, static_cast<unsigned>(r.output_types[i]));
    FUZZ_CHECK(t.ndim <= es::ipc::kMaxDims, "output %u: rank %u accepted", i, t.ndim);
    for (uint32_t d = 0; d < t.ndim; ++d) {
      FUZZ_CHECK(t.dims[d] >= 0, "output %u: dim %u = %lld accepted", i, d, static_cast<long long>(t.dims[d]));
    }
    const std::optional<uint64_t> bytes =
        es::fuzz::ExactBytes(t.dims, t.ndim, es::DataTypeSize(static_cast<es::DataType>(t.datatype)));
    FUZZ_CHECK(bytes && *bytes == t.bytes, "output %u: %llu bytes accepted for its dims (%s)", i,
               static_cast<unsigned long long>(t.bytes), bytes ? std::to_string(*bytes).c_str() : "2^64 or more");
    FUZZ_CHECK(u128{t.offset} >= region_begin && u128{t.offset} + t.bytes <= region_end,
               "output %u: [%llu, +%llu) accepted outside the reservation [%llu, +%llu)", i,
               static_cast<unsigned long long>(t.offset), static_cast<unsigned long long>(t.bytes),
               static_cast<unsigned long long>(r.output_offset), static_cast<unsigned long long>(r.output_capacity));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  es::Reservation reservation;
  reservation.output_offset = Take64(data, size);
  reservation.output_capacity = Take64(data, size);
  if (size == 0) return -1;
  const size_t n = data[0] % (es::ipc::kMaxTensors + 1);
  ++data;
  --size;
  std::vector<es::DataType> types;  // what the reservation views
  for (size_t i = 0; i < n; ++i) {
    const uint8_t type = size > 0 ? data[0] : 0;
    if (size > 0) {
      ++data;
      --size;
    }
    // A model's declared outputs always have a real datatype (BOOL .. FP64).
    types.push_back(static_cast<es::DataType>(1 + type % static_cast<int>(es::DataType::kFp64)));
  }
  reservation.output_types = types;
  es::ipc::CompletionDesc completion;
  std::memset(&completion, 0, sizeof(completion));
  std::memcpy(&completion, data, size < sizeof(completion) ? size : sizeof(completion));

  for (uint32_t code : {completion.status_code, 0u, 15u, 16u, UINT32_MAX}) {
    FUZZ_CHECK(es::KnownStatusCode(code) == (code <= 15), "KnownStatusCode(%u) is wrong", code);
  }
  const es::Status status = es::CheckCompletion(completion, reservation);
  if (status.ok()) {
    CheckAccepted(completion, reservation);
  } else {
    FUZZ_CHECK(status.code() == es::StatusCode::kInternal, "a failed check answers %s, not INTERNAL",
               es::StatusCodeName(status.code()));
    FUZZ_CHECK(!status.message().empty(), "a failed check without a message");
  }
  return 0;
}
