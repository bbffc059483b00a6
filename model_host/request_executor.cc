#include "model_host/request_executor.h"

#include <chrono>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/checked_math.h"
#include "common/steady_clock.h"

namespace es {
namespace {

uint64_t AlignUp(uint64_t v) { return (v + ipc::kCacheLine - 1) / ipc::kCacheLine * ipc::kCacheLine; }

// Checks one input descriptor against the arena and computes its view.
Status ViewInput(const ipc::Channel& channel, const ipc::TensorDesc& desc, const TensorSpec& spec,
                 const std::string& model, TensorView* view) {
  // Made only for an error: an honest request passes every check, and this
  // runs for each input of each call.
  auto invalid = [&](const char* what) {
    return Status::InvalidArgument("model '" + model + "' input '" + spec.name + "': " + what);
  };
  if (desc.ndim > ipc::kMaxDims) return invalid("descriptor rank out of range");
  const auto type = static_cast<DataType>(desc.datatype);
  if (type != spec.datatype) return invalid("descriptor datatype disagrees with the config");
  // Checked: eight dims of up to 2^40 (or two of 2^32) wrap an unchecked
  // product, which a small (or empty) byte count would then "match".
  const std::optional<uint64_t> bytes =
      TensorBytes(std::span<const int64_t>(desc.dims, desc.ndim), DataTypeSize(type));
  if (!bytes) return invalid("descriptor has a negative or huge dim (its size overflows 64 bits)");
  if (*bytes != desc.bytes) return invalid("descriptor byte size disagrees with its shape");
  if (!channel.ArenaRangeValid(desc.offset, desc.bytes)) return invalid("descriptor points outside the arena");
  view->datatype = type;
  view->shape.assign(desc.dims, desc.dims + desc.ndim);
  view->data = channel.arena() + desc.offset;
  view->bytes = desc.bytes;
  return Status::Ok();
}

}  // namespace

void SetCompletionMessage(ipc::CompletionDesc* completion, const std::string& message) {
  const size_t n = std::min(message.size(), sizeof(completion->message) - 1);
  std::memcpy(completion->message, message.data(), n);
  completion->message[n] = '\0';
}

std::string RequestModelName(const ipc::RequestDesc& request) {
  return std::string(request.model, strnlen(request.model, sizeof(request.model)));
}

void RequestExecutor::AddModel(std::shared_ptr<ModelRunner> runner) {
  Key key{runner->config().name, runner->version()};
  MutexLock lock(&mu_);
  models_[std::move(key)] = std::move(runner);
}

bool RequestExecutor::RemoveModel(const std::string& name, int64_t version) {
  std::shared_ptr<ModelRunner> dropped;  // freed after the lock, if no request holds it
  MutexLock lock(&mu_);
  auto it = models_.find(Key{name, version});
  if (it == models_.end()) return false;
  dropped = std::move(it->second);
  models_.erase(it);
  return true;
}

size_t RequestExecutor::model_count() const {
  MutexLock lock(&mu_);
  return models_.size();
}

std::shared_ptr<ModelRunner> RequestExecutor::Find(const std::string& name, int64_t version) const {
  MutexLock lock(&mu_);
  auto it = models_.find(Key{name, version});
  return it == models_.end() ? nullptr : it->second;
}

void RequestExecutor::Execute(const ipc::RequestDesc& request, ipc::CompletionDesc* completion) const {
  completion->request_id = request.request_id;
  completion->num_outputs = 0;
  completion->message[0] = '\0';
  const auto start = SteadyClock::now();
  Status status = Run(request, completion);
  completion->compute_ns = static_cast<uint64_t>(NanosecondsSince(start));
  completion->compute_start_ns = SteadyNs(start);
  completion->status_code = static_cast<uint32_t>(status.code());
  if (!status.ok()) {
    completion->num_outputs = 0;
    SetCompletionMessage(completion, status.message());
  }
}

Status RequestExecutor::Run(const ipc::RequestDesc& request, ipc::CompletionDesc* completion) const {
  const std::string name = RequestModelName(request);
  const std::shared_ptr<ModelRunner> runner = Find(name, request.version);
  if (runner == nullptr) {
    return Status::NotFound("model '" + name + "' version " + std::to_string(request.version) +
                            " is not loaded on this host");
  }
  const ModelConfig& config = runner->config();
  if (request.num_inputs != config.inputs.size() || request.num_inputs > ipc::kMaxTensors) {
    return Status::InvalidArgument("model '" + name + "': descriptor input count " +
                                   std::to_string(request.num_inputs) + " disagrees with the config");
  }
  if (config.outputs.size() > ipc::kMaxTensors) {
    return Status::InvalidArgument("model '" + name + "' has more outputs than a completion carries");
  }
  if (!channel_->ArenaRangeValid(request.output_offset, request.output_capacity)) {
    return Status::InvalidArgument("model '" + name + "': output region lies outside the arena");
  }
  std::vector<TensorView> inputs(request.num_inputs);
  for (uint32_t i = 0; i < request.num_inputs; ++i) {
    ES_RETURN_IF_ERROR(ViewInput(*channel_, request.inputs[i], config.inputs[i], name, &inputs[i]));
  }

  // Outputs are packed one after another, each cache-line aligned, into the
  // region the router reserved.
  uint64_t cursor = 0;
  OutputAllocator alloc = [&](size_t index, DataType type, const std::vector<int64_t>& shape, size_t bytes,
                              Status* error) -> void* {
    const uint64_t start = AlignUp(cursor);
    if (index >= ipc::kMaxTensors || shape.size() > ipc::kMaxDims) {
      *error = Status::InvalidArgument("model '" + name + "': output rank or count exceeds the IPC limits");
      return nullptr;
    }
    if (start > request.output_capacity || bytes > request.output_capacity - start) {
      *error = Status::ResourceExhausted("model '" + name + "' output '" + config.outputs[index].name +
                                         "' needs " + std::to_string(bytes) + " bytes, more than the " +
                                         std::to_string(request.output_capacity) + " reserved");
      return nullptr;
    }
    cursor = start + bytes;
    ipc::TensorDesc& out = completion->outputs[index];
    out.offset = request.output_offset + start;
    out.bytes = bytes;
    out.datatype = static_cast<uint32_t>(type);
    out.ndim = static_cast<uint32_t>(shape.size());
    for (size_t d = 0; d < shape.size(); ++d) out.dims[d] = shape[d];
    completion->num_outputs = static_cast<uint32_t>(std::max<size_t>(completion->num_outputs, index + 1));
    return channel_->arena() + out.offset;
  };
  return runner->Run(inputs, alloc);
}

}  // namespace es
