#include "server/host_connection.h"

#include <cstring>

namespace es {
namespace {

uint64_t AlignUp(uint64_t v) { return (v + ipc::kCacheLine - 1) / ipc::kCacheLine * ipc::kCacheLine; }

}  // namespace

StatusOr<std::unique_ptr<HostConnection>> HostConnection::Create(const std::string& host_name,
                                                                 uint64_t arena_bytes, ipc::WaitPolicy wait) {
  ipc::ChannelOptions options;
  options.arena_bytes = arena_bytes;
  auto channel = ipc::Channel::Create(options);
  if (!channel.ok()) {
    return Status(channel.status().code(), "host '" + host_name + "': " + channel.status().message());
  }
  return std::unique_ptr<HostConnection>(new HostConnection(host_name, std::move(channel).value(), wait));
}

HostConnection::HostConnection(std::string host_name, ipc::Channel channel, ipc::WaitPolicy wait)
    : host_name_(std::move(host_name)),
      channel_(std::move(channel)),
      end_(&channel_, wait),
      arena_(channel_.arena_bytes()) {}

HostConnection::~HostConnection() { Close(Status::Unavailable("host '" + host_name_ + "' connection closed")); }

void HostConnection::StartCompletionThread() { completion_thread_ = std::thread([this] { CompletionLoop(); }); }

Status HostConnection::Submit(const std::string& model, int64_t version, const std::vector<TensorParts>& inputs,
                              uint64_t output_capacity, Done done) {
  if (inputs.size() > ipc::kMaxTensors) {
    return Status::InvalidArgument("model '" + model + "' has more inputs than the IPC channel carries");
  }
  if (model.size() >= ipc::kMaxModelName) {
    return Status::InvalidArgument("model name '" + model + "' is too long for the IPC channel");
  }
  uint64_t total = AlignUp(output_capacity);
  for (const auto& in : inputs) total += AlignUp(in.bytes());
  auto region = arena_.Allocate(total);
  if (!region) {
    return Status::ResourceExhausted("host '" + host_name_ + "': tensor arena full (" +
                                     std::to_string(total) + " bytes requested for model '" + model + "')");
  }

  ipc::RequestDesc desc{};
  desc.request_id = next_id_.fetch_add(1, std::memory_order_relaxed);
  desc.version = version;
  std::memcpy(desc.model, model.data(), model.size());
  desc.num_inputs = static_cast<uint32_t>(inputs.size());
  uint64_t cursor = *region;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorParts& in = inputs[i];
    ipc::TensorDesc& t = desc.inputs[i];
    t.offset = cursor;
    t.bytes = in.bytes();
    t.datatype = static_cast<uint32_t>(in.datatype);
    t.ndim = static_cast<uint32_t>(in.shape.size());
    for (size_t d = 0; d < in.shape.size() && d < ipc::kMaxDims; ++d) t.dims[d] = in.shape[d];
    // The one copy of each request's bytes: into shared memory, where the
    // host reads them in place as one contiguous tensor.
    uint8_t* dst = channel_.arena() + cursor;
    for (const auto& [data, bytes] : in.pieces) {
      if (bytes > 0) std::memcpy(dst, data, bytes);
      dst += bytes;
    }
    cursor += AlignUp(t.bytes);
  }
  desc.output_offset = cursor;
  desc.output_capacity = output_capacity;

  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) {
      arena_.Free(*region);
      return Status::Unavailable("host '" + host_name_ + "' is down");
    }
    pending_.emplace(desc.request_id, Pending{*region, std::move(done)});
    outstanding_.fetch_add(1, std::memory_order_relaxed);
  }
  Status pushed = end_.Submit(desc);
  if (!pushed.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (pending_.erase(desc.request_id) > 0) {
      outstanding_.fetch_sub(1, std::memory_order_relaxed);
      arena_.Free(*region);
      return Status(pushed.code(), "host '" + host_name_ + "': " + pushed.message());
    }
    // Close() raced with us and already failed (and freed) the request.
    return Status::Ok();
  }
  return Status::Ok();
}

void HostConnection::CompletionLoop() {
  ipc::CompletionDesc completion;
  while (!stop_.load(std::memory_order_acquire)) {
    if (end_.NextCompletion(&completion)) Finish(completion);
  }
}

void HostConnection::Finish(const ipc::CompletionDesc& completion) {
  Pending pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(completion.request_id);
    if (it == pending_.end()) return;  // unknown id: a corrupt or stale completion, ignored
    pending = std::move(it->second);
    pending_.erase(it);
  }
  Status status = Status::Ok();
  if (completion.status_code != 0) {
    const char* msg = completion.message;
    status = Status(static_cast<StatusCode>(completion.status_code),
                    std::string(msg, strnlen(msg, sizeof(completion.message))));
  }
  pending.done(status, status.ok() ? &completion : nullptr, channel_.arena());
  arena_.Free(pending.arena_offset);
  outstanding_.fetch_sub(1, std::memory_order_relaxed);
}

void HostConnection::Close(const Status& why) {
  stop_.store(true, std::memory_order_release);
  if (completion_thread_.joinable()) {
    channel_.completions().NotifyConsumer();
    completion_thread_.join();
  }
  std::unordered_map<uint64_t, Pending> failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    failed.swap(pending_);
  }
  for (auto& [id, pending] : failed) {
    pending.done(why, nullptr, nullptr);
    arena_.Free(pending.arena_offset);
    outstanding_.fetch_sub(1, std::memory_order_relaxed);
  }
}

}  // namespace es
