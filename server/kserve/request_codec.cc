#include "server/kserve/request_codec.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "common/checked_math.h"

namespace es {
namespace {

using inference::InferTensorContents;
using inference::ModelInferRequest;

// A shape for a message: its first dims only, as a client may send millions.
std::string ShapeString(const std::vector<int64_t>& shape) {
  constexpr size_t kShownDims = 16;
  std::string s = "[";
  for (size_t i = 0; i < std::min(shape.size(), kShownDims); ++i) {
    if (i) s.push_back(',');
    s += std::to_string(shape[i]);
  }
  if (shape.size() > kShownDims) s += ",... (" + std::to_string(shape.size()) + " dims)";
  s.push_back(']');
  return s;
}

bool HasTypedContents(const InferTensorContents& c) {
  return c.bool_contents_size() || c.int_contents_size() || c.int64_contents_size() || c.uint_contents_size() ||
         c.uint64_contents_size() || c.fp32_contents_size() || c.fp64_contents_size() || c.bytes_contents_size();
}

// A repeated field's elements, read in place as bytes.
template <typename Repeated>
const uint8_t* Bytes(const Repeated& r) {
  return reinterpret_cast<const uint8_t*>(r.data());
}

// The values UINT8, INT8 and INT16 hold (their typed contents travel in the
// 32-bit uint_contents / int_contents fields).
std::pair<int64_t, int64_t> NarrowRange(DataType type) {
  switch (type) {
    case DataType::kUint8:
      return {0, std::numeric_limits<uint8_t>::max()};
    case DataType::kInt8:
      return {std::numeric_limits<int8_t>::min(), std::numeric_limits<int8_t>::max()};
    default:
      return {std::numeric_limits<int16_t>::min(), std::numeric_limits<int16_t>::max()};
  }
}

// BOOL tensors are one byte per element, 0 or 1: LibTorch (and the ensembles'
// combiners) read any other byte as an undefined bool.
Status CheckBoolBytes(const uint8_t* data, size_t bytes, const std::string& where) {
  for (size_t i = 0; i < bytes; ++i) {
    if (data[i] > 1) {
      return Status::InvalidArgument(where + "BOOL element " + std::to_string(i) + " is byte " +
                                     std::to_string(data[i]) + "; BOOL elements must be 0 or 1");
    }
  }
  return Status::Ok();
}

// Points `input` at the typed contents, converting (into request scratch)
// where the protobuf element type is wider than the tensor's.
Status ReadTyped(const InferTensorContents& c, const std::string& where, InferRequest* request, InferInput* input) {
  const size_t expected = input->bytes / DataTypeSize(input->datatype);
  size_t count = 0;
  switch (input->datatype) {
    case DataType::kFp32:
      count = c.fp32_contents_size();
      input->data = Bytes(c.fp32_contents());
      break;
    case DataType::kFp64:
      count = c.fp64_contents_size();
      input->data = Bytes(c.fp64_contents());
      break;
    case DataType::kInt64:
      count = c.int64_contents_size();
      input->data = Bytes(c.int64_contents());
      break;
    case DataType::kInt32:
      count = c.int_contents_size();
      input->data = Bytes(c.int_contents());
      break;
    case DataType::kBool:
      count = c.bool_contents_size();
      input->data = Bytes(c.bool_contents());
      break;
    case DataType::kUint8:
    case DataType::kInt8:
    case DataType::kInt16: {
      const bool is_unsigned = input->datatype == DataType::kUint8;
      count = is_unsigned ? c.uint_contents_size() : c.int_contents_size();
      if (count != expected) break;
      // The protobuf fields are 32 bits wide; a value the tensor's type cannot
      // hold is the client's mistake, not something to truncate silently.
      const auto [lo, hi] = NarrowRange(input->datatype);
      auto buf = std::make_unique<std::string>(input->bytes, '\0');
      const size_t width = DataTypeSize(input->datatype);
      for (size_t i = 0; i < count; ++i) {
        const int64_t v =
            is_unsigned ? int64_t{c.uint_contents(static_cast<int>(i))} : int64_t{c.int_contents(static_cast<int>(i))};
        if (v < lo || v > hi) {
          return Status::InvalidArgument(where + "typed element " + std::to_string(i) + " (value " + std::to_string(v) +
                                         ") is out of range for " + DataTypeName(input->datatype) + " [" +
                                         std::to_string(lo) + ", " + std::to_string(hi) + "]");
        }
        std::memcpy(buf->data() + i * width, &v, width);  // little-endian low bytes
      }
      input->data = reinterpret_cast<const uint8_t*>(buf->data());
      request->scratch.push_back(std::move(buf));
      break;
    }
    default:
      return Status::InvalidArgument(where + "typed contents are not supported for datatype " +
                                     DataTypeName(input->datatype) + "; send raw_input_contents");
  }
  if (count != expected) {
    return Status::InvalidArgument(where + "has " + std::to_string(count) + " typed element(s) for " +
                                   DataTypeName(input->datatype) + ", shape " + ShapeString(input->shape) + " needs " +
                                   std::to_string(expected));
  }
  return Status::Ok();
}

Status CheckShape(const ModelConfig& model, const TensorSpec& spec, const std::vector<int64_t>& shape,
                  const std::string& where) {
  const size_t offset = model.batched() ? 1 : 0;
  const std::string expected = ShapeString(MetadataShape(model, spec));
  if (shape.size() != spec.dims.size() + offset) {
    return Status::InvalidArgument(where + "shape " + ShapeString(shape) + " does not match the expected " + expected);
  }
  for (int64_t d : shape) {
    if (d < 0) return Status::InvalidArgument(where + "shape " + ShapeString(shape) + " has a negative dimension");
  }
  if (model.batched() && (shape[0] < 1 || shape[0] > model.max_batch_size)) {
    return Status::InvalidArgument(where + "batch size " + std::to_string(shape[0]) + " is outside [1, " +
                                   std::to_string(model.max_batch_size) + "]");
  }
  for (size_t i = 0; i < spec.dims.size(); ++i) {
    if (spec.dims[i] != -1 && spec.dims[i] != shape[i + offset]) {
      std::string message = where;
      message += "shape " + ShapeString(shape) + " does not match the expected " + expected;
      return Status::InvalidArgument(std::move(message));
    }
  }
  return Status::Ok();
}

// A tensor's shared-memory parameters (Triton's system shared-memory
// extension): `shared_memory_region` (string) names a registered region,
// `shared_memory_byte_size` (int64) is required with it, and
// `shared_memory_offset` (int64) is optional (0); neither may come without
// the region.
struct ShmParams {
  bool used = false;
  std::string region;
  uint64_t offset = 0;
  uint64_t byte_size = 0;
};

template <typename Tensor>
StatusOr<ShmParams> ParseShmParams(const Tensor& tensor, const std::string& where) {
  ShmParams out;
  const auto& params = tensor.parameters();
  const auto region = params.find("shared_memory_region");
  if (region != params.end()) {
    if (region->second.parameter_choice_case() != inference::InferParameter::kStringParam) {
      return Status::InvalidArgument(where + "parameter 'shared_memory_region' must be a string");
    }
    out.used = true;
    out.region = region->second.string_param();
  }
  auto read_size = [&](const char* key, bool required, uint64_t* value) -> Status {
    const auto it = params.find(key);
    if (it == params.end()) {
      if (required && out.used) {
        return Status::InvalidArgument(where + "parameter '" + key + "' must be given with 'shared_memory_region'");
      }
      return Status::Ok();
    }
    if (!out.used) {
      return Status::InvalidArgument(where + "parameter '" + key + "' is given without 'shared_memory_region'");
    }
    if (it->second.parameter_choice_case() != inference::InferParameter::kInt64Param || it->second.int64_param() < 0) {
      return Status::InvalidArgument(where + "parameter '" + key + "' must be an int64 >= 0");
    }
    *value = static_cast<uint64_t>(it->second.int64_param());
    return Status::Ok();
  };
  ES_RETURN_IF_ERROR(read_size("shared_memory_offset", false, &out.offset));
  ES_RETURN_IF_ERROR(read_size("shared_memory_byte_size", true, &out.byte_size));
  return out;
}

// `status` with `where` (the model and tensor) in front of its message.
Status Within(const std::string& where, const Status& status) {
  return status.ok() ? status : Status(status.code(), where + status.message());
}

// now + `micros`, saturating at time_point::max() (no deadline) instead of
// overflowing: the clock counts nanoseconds, so INT64_MAX µs does not fit.
std::chrono::steady_clock::time_point DeadlineAfter(std::chrono::steady_clock::time_point now, int64_t micros) {
  using std::chrono::steady_clock;
  const auto headroom =
      std::chrono::duration_cast<std::chrono::microseconds>(steady_clock::time_point::max() - now).count();
  if (micros >= headroom) return steady_clock::time_point::max();
  return now + std::chrono::duration_cast<steady_clock::duration>(std::chrono::microseconds(micros));
}

Status ReadParameters(const ModelInferRequest& proto, InferRequest* request) {
  const ModelConfig& model = *request->model;
  for (const auto& [key, value] : proto.parameters()) {
    if (key == "return_member_outputs" || key == "return_uncertainty") {
      if (value.parameter_choice_case() != inference::InferParameter::kBoolParam) {
        return Status::InvalidArgument("model '" + model.name + "': parameter '" + key + "' must be a bool");
      }
      if (!model.is_ensemble() && value.bool_param()) {
        return Status::InvalidArgument("model '" + model.name + "' is not an ensemble; parameter '" + key +
                                       "' applies to ensembles only");
      }
      if (model.ensemble.cascade() && value.bool_param()) {
        // Each row has its own set of members (those of the stages it
        // reached): there is no one member output or disagreement per row.
        return Status::InvalidArgument("model '" + model.name + "' is a cascade; parameter '" + key +
                                       "' is not available for cascades (ask for output 'exit_stage')");
      }
      (key == "return_member_outputs" ? request->return_member_outputs : request->return_uncertainty) =
          value.bool_param();
    } else if (key == "exact") {
      // An ensemble with an overload ladder answers in full, never from a
      // cheaper rung; harmless elsewhere (every other model answers in full).
      if (value.parameter_choice_case() != inference::InferParameter::kBoolParam) {
        return Status::InvalidArgument("model '" + model.name + "': parameter 'exact' must be a bool");
      }
      request->exact = value.bool_param();
    } else if (key == "priority") {
      const int levels = model.dynamic_batching.enabled ? model.dynamic_batching.priority_levels : 1;
      if (value.parameter_choice_case() != inference::InferParameter::kInt64Param || value.int64_param() < 0 ||
          value.int64_param() > levels) {
        return Status::InvalidArgument("model '" + model.name + "': parameter 'priority' must be an int64 in [0, " +
                                       std::to_string(levels) + "] (1 = highest, 0 = default)");
      }
      request->priority = static_cast<int>(value.int64_param());
    } else if (key == "timeout") {
      if (value.parameter_choice_case() != inference::InferParameter::kInt64Param || value.int64_param() < 0) {
        return Status::InvalidArgument("model '" + model.name + "': parameter 'timeout' must be an int64 >= 0 (µs)");
      }
      if (value.int64_param() > 0) {
        request->deadline =
            std::min(request->deadline, DeadlineAfter(std::chrono::steady_clock::now(), value.int64_param()));
      }
    }
    // Other parameters (e.g. Triton's sequence or priority keys) are ignored, as Triton does.
  }
  return Status::Ok();
}

Status CheckRequestedOutputs(const ModelInferRequest& proto, const SharedMemoryRegistry* shm, InferRequest* request) {
  const ModelConfig& model = *request->model;
  std::set<std::string> known;
  for (const auto& o : model.outputs) known.insert(o.name);
  if (request->return_uncertainty) known.insert({"entropy", "disagreement"});
  if (model.ensemble.cascade()) known.insert("exit_stage");
  if (request->return_member_outputs) {
    for (const auto& m : model.ensemble.members) {
      for (size_t k = 0; k < m.Count(); ++k) {
        for (const auto& o : model.outputs) known.insert(m.NameOf(k) + "." + o.name);
      }
    }
  }
  std::set<std::string> requested;
  for (const auto& out : proto.outputs()) {
    if (!known.count(out.name())) {
      return Status::InvalidArgument("model '" + model.name + "' has no output named '" + ShownClientText(out.name()) +
                                     "'");
    }
    // Each answer output is moved out once; a second request for it would
    // find an empty tensor (and KServe gives it no meaning).
    if (!requested.insert(out.name()).second) {
      return Status::InvalidArgument("model '" + model.name + "': output '" + out.name() +
                                     "' requested more than once");
    }
    request->requested_outputs.push_back(out.name());
    const std::string where = "model '" + model.name + "' output '" + ShownClientText(out.name()) + "': ";
    ES_ASSIGN_OR_RETURN(ShmParams params, ParseShmParams(out, where));
    if (!params.used) continue;
    if (shm == nullptr) {
      return Status::InvalidArgument(where + "shared-memory outputs are not available on this path");
    }
    // Opened now: the region is checked before the run, and an unregister
    // during the run leaves this request its descriptor.
    StatusOr<std::shared_ptr<SharedMemoryRegistry::Region>> place =
        shm->Open(params.region, params.offset, params.byte_size);
    if (!place.ok()) return Within(where, place.status());
    request->output_shm.resize(request->requested_outputs.size());
    request->output_shm.back() = {params.region, params.offset, params.byte_size, std::move(place).value()};
  }
  if (!request->output_shm.empty()) request->output_shm.resize(request->requested_outputs.size());
  return Status::Ok();
}

}  // namespace

std::vector<int64_t> MetadataShape(const ModelConfig& model, const TensorSpec& spec) {
  std::vector<int64_t> shape;
  if (model.batched()) shape.push_back(-1);
  shape.insert(shape.end(), spec.dims.begin(), spec.dims.end());
  return shape;
}

StatusOr<std::shared_ptr<InferRequest>> DecodeInferRequest(const ModelInferRequest& proto, const ServerConfig& config,
                                                           const SharedMemoryRegistry* shm) {
  return DecodeInferRequest(proto, StaticCatalog(&config), config.limits, shm);
}

namespace {

// The inputs of one request, decoded in three passes: the plan (which inputs
// are in shared memory, whether the raw contents match), each input's checks
// and bytes, then the shared-memory reads, last, so that a request failing a
// cheap check reads nothing.
class InputsDecoder {
 public:
  InputsDecoder(const ModelInferRequest& proto, const ModelConfig& model, const Limits& limits,
                const SharedMemoryRegistry* shm, InferRequest* request)
      : proto_(proto), model_(model), limits_(limits), shm_(shm), request_(request) {}

  Status Decode() {
    ES_RETURN_IF_ERROR(Plan());
    request_->inputs.resize(model_.inputs.size());
    seen_.assign(model_.inputs.size(), false);
    for (int i = 0; i < proto_.inputs_size(); ++i) ES_RETURN_IF_ERROR(DecodeOne(i));
    ES_RETURN_IF_ERROR(CheckBatchSizesAgree());
    return ReadSharedMemory();
  }

 private:
  struct ShmRead {
    size_t input;  // in request->inputs (config order)
    int tensor;    // in proto.inputs()
  };

  std::string Where(const std::string& input) const {
    return "model '" + model_.name + "' input '" + ShownClientText(input) + "': ";
  }

  // Triton's rule: raw_input_contents holds the inputs that are not in
  // shared memory, in the order of `inputs`; a shared-memory input takes no
  // entry.
  Status Plan() {
    const int n = proto_.inputs_size();
    if (static_cast<size_t>(n) != model_.inputs.size()) {
      return Status::InvalidArgument("model '" + model_.name + "' expects " + std::to_string(model_.inputs.size()) +
                                     " input(s), the request has " + std::to_string(n));
    }
    input_shm_.resize(static_cast<size_t>(n));
    int in_message = 0;
    for (int i = 0; i < n; ++i) {
      const auto& in = proto_.inputs(i);
      ES_ASSIGN_OR_RETURN(input_shm_[static_cast<size_t>(i)], ParseShmParams(in, Where(in.name())));
      if (!input_shm_[static_cast<size_t>(i)].used) ++in_message;
    }
    raw_ = proto_.raw_input_contents_size() > 0;
    if (raw_ && proto_.raw_input_contents_size() != in_message) {
      return Status::InvalidArgument("model '" + model_.name + "': " +
                                     std::to_string(proto_.raw_input_contents_size()) + " raw_input_contents for " +
                                     std::to_string(in_message) + " input(s)" +
                                     (in_message < n ? " not in shared memory" : ""));
    }
    return Status::Ok();
  }

  // The config's input of that name, checked against its datatype and shape;
  // its bytes counted against max_request_bytes.
  StatusOr<size_t> Describe(const inference::ModelInferRequest::InferInputTensor& in, const std::string& where) {
    size_t index = 0;
    while (index < model_.inputs.size() && model_.inputs[index].name != in.name()) ++index;
    if (index == model_.inputs.size()) {
      return Status::InvalidArgument("model '" + model_.name + "' has no input named '" + ShownClientText(in.name()) +
                                     "'");
    }
    if (seen_[index]) return Status::InvalidArgument(where + "given more than once");
    seen_[index] = true;
    const TensorSpec& spec = model_.inputs[index];
    const auto type = ParseDataType(in.datatype());
    if (!type || *type != spec.datatype) {
      return Status::InvalidArgument(where + "datatype '" + ShownClientText(in.datatype()) +
                                     "' does not match the expected " + DataTypeName(spec.datatype));
    }
    InferInput& input = request_->inputs[index];
    input.spec = &spec;
    input.datatype = *type;
    input.shape.assign(in.shape().begin(), in.shape().end());
    ES_RETURN_IF_ERROR(CheckShape(model_, spec, input.shape, where));
    // Checked: two variable dims of 2^32 wrap an unchecked product to 0,
    // which an empty payload would then "match".
    const std::optional<uint64_t> tensor_bytes = TensorBytes(input.shape, DataTypeSize(*type));
    if (!tensor_bytes) {
      return Status::InvalidArgument(where + "the size of shape " + ShapeString(input.shape) + " of " +
                                     DataTypeName(*type) + " overflows 64 bits");
    }
    input.bytes = *tensor_bytes;
    const std::optional<uint64_t> sum = CheckedAdd(total_bytes_, input.bytes);
    if (!sum || *sum > static_cast<uint64_t>(limits_.max_request_bytes)) {
      return Status::ResourceExhausted("model '" + model_.name + "': request of at least " +
                                       std::to_string(sum ? *sum : input.bytes) + " bytes exceeds the limit of " +
                                       std::to_string(limits_.max_request_bytes) + " bytes");
    }
    total_bytes_ = *sum;
    return index;
  }

  Status DecodeOne(int i) {
    const auto& in = proto_.inputs(i);
    const std::string where = Where(in.name());
    ES_ASSIGN_OR_RETURN(const size_t index, Describe(in, where));
    InferInput& input = request_->inputs[index];
    const bool typed = in.has_contents() && HasTypedContents(in.contents());
    const ShmParams& in_shm = input_shm_[static_cast<size_t>(i)];
    if (in_shm.used) {
      if (typed) return Status::InvalidArgument(where + "both shared memory and typed contents given; use one");
      if (shm_ == nullptr) return Status::InvalidArgument(where + "shared-memory inputs are not available on this path");
      if (in_shm.byte_size != input.bytes) {
        return Status::InvalidArgument(where + "shared_memory_byte_size is " + std::to_string(in_shm.byte_size) +
                                       ", shape " + ShapeString(input.shape) + " of " +
                                       DataTypeName(input.datatype) + " needs " + std::to_string(input.bytes));
      }
      shm_reads_.push_back({index, i});  // read once every cheap check has passed
      return Status::Ok();
    }
    if (raw_ && typed) {
      return Status::InvalidArgument(where + "both raw_input_contents and typed contents given; use one");
    }
    if (!raw_) return ReadTyped(in.contents(), where, request_, &input);
    const std::string& bytes = proto_.raw_input_contents(raw_index_++);
    if (bytes.size() != input.bytes) {
      return Status::InvalidArgument(where + "raw content has " + std::to_string(bytes.size()) + " bytes, shape " +
                                     ShapeString(input.shape) + " of " + DataTypeName(input.datatype) + " needs " +
                                     std::to_string(input.bytes));
    }
    input.data = reinterpret_cast<const uint8_t*>(bytes.data());
    if (input.datatype == DataType::kBool) ES_RETURN_IF_ERROR(CheckBoolBytes(input.data, input.bytes, where));
    return Status::Ok();
  }

  // Every input of a batched model must agree on the batch size.
  Status CheckBatchSizesAgree() const {
    if (!model_.batched()) return Status::Ok();
    for (const auto& in : request_->inputs) {
      if (in.shape[0] != request_->inputs[0].shape[0]) {
        return Status::InvalidArgument("model '" + model_.name + "': inputs disagree on the batch size");
      }
    }
    return Status::Ok();
  }

  Status ReadSharedMemory() {
    for (const ShmRead& read : shm_reads_) {
      InferInput& input = request_->inputs[read.input];
      const ShmParams& params = input_shm_[static_cast<size_t>(read.tensor)];
      const std::string where = Where(input.spec->name);
      if (input.datatype != DataType::kBool) {
        // Read when the request is submitted, straight into the host's arena
        // (one copy instead of two: 16 MiB costs milliseconds). The region is
        // checked and held open now; the read itself fails cleanly if the
        // client shrinks its object meanwhile.
        StatusOr<std::shared_ptr<SharedMemoryRegistry::Region>> view =
            shm_->Open(params.region, params.offset, input.bytes);
        if (!view.ok()) return Within(where, view.status());
        input.read_into = [view = std::shared_ptr<const SharedMemoryRegistry::Region>(std::move(view).value()),
                           where](uint8_t* dest) { return Within(where, SharedMemoryRegistry::ReadAll(*view, dest)); };
        continue;
      }
      // BOOL bytes must be checked (0 or 1) before anything computes on them:
      // read now. Bounded: the inputs' bytes together are inside
      // max_request_bytes (checked in Describe).
      auto buffer = std::make_unique_for_overwrite<uint8_t[]>(input.bytes);
      ES_RETURN_IF_ERROR(Within(where, shm_->ReadInto(params.region, params.offset, input.bytes, buffer.get())));
      input.data = buffer.get();
      request_->shm_scratch.push_back(std::move(buffer));
      ES_RETURN_IF_ERROR(CheckBoolBytes(input.data, input.bytes, where));
    }
    return Status::Ok();
  }

  const ModelInferRequest& proto_;
  const ModelConfig& model_;
  const Limits& limits_;
  const SharedMemoryRegistry* shm_;
  InferRequest* request_;
  std::vector<ShmParams> input_shm_;  // by proto.inputs() index
  bool raw_ = false;
  int raw_index_ = 0;
  std::vector<ShmRead> shm_reads_;
  std::vector<bool> seen_;  // by config index
  uint64_t total_bytes_ = 0;
};

}  // namespace

StatusOr<std::shared_ptr<InferRequest>> DecodeInferRequest(const ModelInferRequest& proto, const ModelCatalog& catalog,
                                                           const Limits& limits, const SharedMemoryRegistry* shm) {
  const ModelConfig* model = catalog.Find(proto.model_name());
  if (model == nullptr) return Status::NotFound("unknown model '" + ShownClientText(proto.model_name()) + "'");
  auto request = std::make_shared<InferRequest>();
  request->model = model;
  request->id = proto.id();
  ES_ASSIGN_OR_RETURN(request->version, ResolveVersion(catalog, *model, proto.model_version()));
  request->version_pinned = !proto.model_version().empty();
  ES_RETURN_IF_ERROR(ReadParameters(proto, request.get()));
  ES_RETURN_IF_ERROR(CheckRequestedOutputs(proto, shm, request.get()));
  ES_RETURN_IF_ERROR(InputsDecoder(proto, *model, limits, shm, request.get()).Decode());
  return request;
}

Status EncodeInferResponse(const InferRequest& request, InferResponse response, inference::ModelInferResponse* proto) {
  proto->set_model_name(request.model->name);
  proto->set_model_version(std::to_string(response.version > 0 ? response.version : request.version));
  // An ensemble's own version is 1; which versions of its members computed
  // the answer is a response parameter (a rollout shows in it).
  if (!response.member_versions.empty()) {
    (*proto->mutable_parameters())["member_versions"].set_string_param(response.member_versions);
  }
  // Which members made the answer: fewer than all when a quorum answered
  // without a failed or slow one (ensemble.min_members).
  if (response.ensemble != nullptr) {
    (*proto->mutable_parameters())["members_used"].set_int64_param(response.ensemble->members_used);
    (*proto->mutable_parameters())["degraded"].set_bool_param(response.ensemble->degraded);
  }
  if (response.cascade != nullptr) {
    (*proto->mutable_parameters())["stages_used"].set_int64_param(response.cascade->stages_used);
  }
  // An overload ladder's answer: which rung made it, and how accurate it is.
  if (!response.served_by.empty()) {
    (*proto->mutable_parameters())["served_by"].set_string_param(response.served_by);
    if (response.served_accuracy >= 0) {
      (*proto->mutable_parameters())["served_accuracy"].set_double_param(response.served_accuracy);
    }
  }
  proto->set_id(request.id);
  auto emit = [proto, &request](InferOutput& out, const SharedMemoryOutput* shm) -> Status {
    auto* t = proto->add_outputs();
    t->set_name(out.name);
    t->set_datatype(DataTypeName(out.datatype));
    for (int64_t d : out.shape) t->add_shape(d);
    std::string* raw = proto->add_raw_output_contents();
    if (shm == nullptr || shm->place == nullptr) {
      *raw = std::move(out.data);
      return Status::Ok();
    }
    // In shared memory: the bytes go into the region. As Triton does, the
    // output keeps an (empty) raw_output_contents entry, so the entries stay
    // index-aligned with `outputs` when only some outputs are in shared memory.
    if (out.data.size() > shm->byte_size) {
      return Status::InvalidArgument("model '" + request.model->name + "' output '" + out.name + "' has " +
                                     std::to_string(out.data.size()) +
                                     " bytes, more than its shared_memory_byte_size " + std::to_string(shm->byte_size) +
                                     " (region '" + shm->region + "')");
    }
    Status written = SharedMemoryRegistry::Write(*shm->place, out.data);
    if (!written.ok()) return Within("model '" + request.model->name + "' output '" + out.name + "': ", written);
    auto& params = *t->mutable_parameters();
    params["shared_memory_region"].set_string_param(shm->region);
    params["shared_memory_offset"].set_int64_param(static_cast<int64_t>(shm->offset));
    // The bytes written (what the client reads), at most the room it gave.
    params["shared_memory_byte_size"].set_int64_param(static_cast<int64_t>(out.data.size()));
    return Status::Ok();
  };
  Status status;
  if (request.requested_outputs.empty()) {
    for (auto& out : response.outputs) {
      status = emit(out, nullptr);
      if (!status.ok()) break;
    }
  } else {
    for (size_t i = 0; i < request.requested_outputs.size() && status.ok(); ++i) {
      const SharedMemoryOutput* shm = request.output_shm.empty() ? nullptr : &request.output_shm[i];
      for (auto& out : response.outputs) {
        if (out.name == request.requested_outputs[i]) {
          status = emit(out, shm);
          if (!status.ok()) break;
        }
      }
    }
  }
  if (!status.ok()) proto->Clear();
  return status;
}

void FillTensorMetadata(const ModelConfig& model, const TensorSpec& spec,
                        inference::ModelMetadataResponse::TensorMetadata* t) {
  t->set_name(spec.name);
  t->set_datatype(DataTypeName(spec.datatype));
  for (int64_t d : MetadataShape(model, spec)) t->add_shape(d);
}

}  // namespace es
