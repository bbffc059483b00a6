#include "model_host/model_loader.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "common/log_setup.h"
#include "config/host_model_spec.h"

namespace es {
namespace {

// A spec is a few hundred bytes; anything far larger is not one.
constexpr uint64_t kMaxSpecBytes = 1 << 20;
constexpr uint64_t kMaxLogSettingsBytes = 256;  // as DecodeLogSettings allows

}  // namespace

ModelLoader::ModelLoader(ipc::HostEnd* end, RequestExecutor* executor, std::string device,
                         const std::atomic<bool>* stop)
    : end_(end), executor_(executor), device_(std::move(device)), stop_(stop) {
  thread_ = std::thread([this] { Loop(); });
}

ModelLoader::~ModelLoader() { Stop(); }

void ModelLoader::Enqueue(const ipc::RequestDesc& request) {
  MutexLock lock(&mu_);
  queue_.push_back(request);
  cv_.NotifyOne();
}

void ModelLoader::Stop() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    cv_.NotifyAll();
  }
  if (thread_.joinable()) thread_.join();
}

void ModelLoader::Loop() {
  for (;;) {
    ipc::RequestDesc request;
    {
      MutexLock lock(&mu_);
      while (queue_.empty() && !stopping_) cv_.Wait(&mu_);
      if (stopping_) return;
      request = queue_.front();
      queue_.pop_front();
    }
    ipc::CompletionDesc completion{};
    completion.request_id = request.request_id;
    const auto start = std::chrono::steady_clock::now();
    const Status status = Carry(request);
    completion.compute_ns = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count());
    completion.status_code = static_cast<uint32_t>(status.code());
    if (!status.ok()) SetCompletionMessage(&completion, status.message());
    if (!end_->Complete(completion, *stop_)) return;
  }
}

Status ModelLoader::Carry(const ipc::RequestDesc& request) {
  const std::string name = RequestModelName(request);
  const std::string what = "model '" + name + "' version " + std::to_string(request.version);
  switch (static_cast<ipc::RequestKind>(request.kind)) {
    case ipc::RequestKind::kLoad: {
      const auto start = std::chrono::steady_clock::now();
      Status s = Load(request);
      if (!s.ok()) {
        spdlog::error("cannot load {}: {}", what, s.message());
        return s;
      }
      spdlog::info(
          "loaded {} in {} ms", what,
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count());
      return Status::Ok();
    }
    case ipc::RequestKind::kUnload:
      if (executor_->RemoveModel(name, request.version)) spdlog::info("unloaded {}", what);
      return Status::Ok();
    case ipc::RequestKind::kLogSettings:
      return ApplyLogSettingsRequest(request);
    case ipc::RequestKind::kInfer:
      break;
  }
  return Status::InvalidArgument("request kind " + std::to_string(request.kind) + " is not a control request");
}

Status ModelLoader::ApplyLogSettingsRequest(const ipc::RequestDesc& request) {
  if (request.num_inputs != 1) return Status::InvalidArgument("a log settings request carries exactly one input");
  const ipc::TensorDesc& desc = request.inputs[0];
  if (desc.bytes > kMaxLogSettingsBytes || !executor_->channel()->ArenaRangeValid(desc.offset, desc.bytes)) {
    return Status::InvalidArgument("the log settings lie outside the arena or are too large");
  }
  const auto* bytes = reinterpret_cast<const char*>(executor_->channel()->arena() + desc.offset);
  const std::string text(bytes, bytes + desc.bytes);  // copied before parsing: the arena is shared memory
  ES_ASSIGN_OR_RETURN(LogSettings settings, DecodeLogSettings(text));
  ApplyLogSettings(settings);
  spdlog::debug("log settings: {}", text);
  return Status::Ok();
}

Status ModelLoader::Load(const ipc::RequestDesc& request) {
  const std::string name = RequestModelName(request);
  if (request.num_inputs != 1) return Status::InvalidArgument("a load request carries exactly one input (the spec)");
  const ipc::TensorDesc& spec_desc = request.inputs[0];
  if (spec_desc.bytes > kMaxSpecBytes || !executor_->channel()->ArenaRangeValid(spec_desc.offset, spec_desc.bytes)) {
    return Status::InvalidArgument("the load request's spec lies outside the arena or is too large");
  }
  const auto* bytes = reinterpret_cast<const char*>(executor_->channel()->arena() + spec_desc.offset);
  // Copied before parsing: the arena is shared memory.
  const std::string text(bytes, bytes + spec_desc.bytes);
  ES_ASSIGN_OR_RETURN(ModelConfig spec, DecodeHostModelSpec(text));
  if (spec.name != name) {
    return Status::InvalidArgument("the load request names model '" + name + "' but its spec is for '" + spec.name +
                                   "'");
  }
  if (request.version < 1) return Status::InvalidArgument("versions are numbered from 1");
  ES_ASSIGN_OR_RETURN(std::unique_ptr<ModelRunner> runner, ModelRunner::Load(spec, request.version, device_));
  executor_->AddModel(std::shared_ptr<ModelRunner>(std::move(runner)));
  return Status::Ok();
}

}  // namespace es
