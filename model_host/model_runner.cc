// TorchScriptRunner: the LibTorch implementation of ModelRunner.
#include "model_host/model_runner.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/cuda.h>
#include <torch/script.h>

#include <cstring>
#include <exception>
#include <filesystem>
#include <optional>
#include <utility>

#include "common/checked_math.h"
#include "torch_utils/torch_convert.h"

namespace es {
namespace {

// See WarmUp(): the profiling executor optimises on the second call.
constexpr int kWarmUpPasses = 2;

std::string ModelLabel(const ModelConfig& config, int64_t version) {
  return "model '" + config.name + "' version " + std::to_string(version);
}

// Runs `body` and turns whatever LibTorch throws into INTERNAL, so no
// exception leaves the runner. c10::Error is asked for its message without
// the C++ backtrace, which is useless to a client.
template <typename Body>
Status CatchTorch(const std::string& label, Body&& body) {
  try {
    return body();
  } catch (const c10::Error& e) {
    return Status::Internal(label + ": " + BriefTorchError(e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return Status::Internal(label + ": " + BriefTorchError(e.what()));
  }
}

// Element count of a shape; -1 if a dim is negative or the count (or its
// size in bytes, at the widest item) does not fit.
int64_t Product(const std::vector<int64_t>& shape) {
  const auto n = ElementCount(shape);
  return n && *n <= static_cast<uint64_t>(INT64_MAX / 8) ? static_cast<int64_t>(*n) : -1;
}

// Declared shape of a tensor: batch dim first when batched, -1 kept.
std::vector<int64_t> FullShape(const ModelConfig& config, const TensorSpec& spec, int64_t batch) {
  std::vector<int64_t> shape;
  if (config.batched()) shape.push_back(batch);
  shape.insert(shape.end(), spec.dims.begin(), spec.dims.end());
  return shape;
}

std::string ShapeString(at::IntArrayRef shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

class TorchScriptRunner final : public ModelRunner {
 public:
  TorchScriptRunner(ModelConfig config, int64_t version, torch::Device device,
                    torch::jit::Module module)
      : config_(std::move(config)),
        version_(version),
        label_(ModelLabel(config_, version)),
        device_(device),
        module_(std::move(module)) {}

  // Forwards on zeros (variable dims as 1), so the first real request does
  // not pay for lazy initialisation. Two passes: TorchScript's profiling
  // executor only optimises the graph on its second call (measured on the zoo
  // MLP, batch 1: 1.5 ms first request after one pass, 0.2 ms after two).
  Status WarmUp() {
    return CatchTorch(label_ + " warm-up", [&]() -> Status {
      c10::InferenceMode guard;
      std::vector<c10::IValue> inputs;
      for (const TensorSpec& spec : config_.inputs) {
        std::vector<int64_t> shape = FullShape(config_, spec, 1);
        for (int64_t& d : shape) d = d < 0 ? 1 : d;
        inputs.emplace_back(torch::zeros(
            shape, torch::TensorOptions().dtype(*ToScalarType(spec.datatype)).device(device_)));
      }
      for (int pass = 0; pass < kWarmUpPasses; ++pass) module_.forward(inputs);
      return Status::Ok();
    });
  }

  Status Run(const std::vector<TensorView>& inputs, const OutputAllocator& alloc) override {
    const Status status = CatchTorch(label_, [&]() -> Status {
      c10::InferenceMode guard;
      std::vector<c10::IValue> args;
      ES_RETURN_IF_ERROR(WrapInputs(inputs, &args));
      std::vector<torch::Tensor> outputs;
      ES_RETURN_IF_ERROR(MatchOutputs(module_.forward(std::move(args)), &outputs));
      for (size_t i = 0; i < outputs.size(); ++i) {
        ES_RETURN_IF_ERROR(CopyOutput(i, outputs[i], alloc));
      }
      return Status::Ok();
    });
    if (device_.is_cpu()) return status;
    // On a GPU the input and output copies are asynchronous on this thread's
    // current stream (the executor's): they must be done before the router
    // is told it may read the outputs and reuse the inputs' memory, failed
    // requests included.
    const Status synced = CatchTorch(label_ + " stream synchronisation", [&]() -> Status {
      c10::impl::getDeviceGuardImpl(device_.type())->getStream(device_).synchronize();
      return Status::Ok();
    });
    return status.ok() ? synced : status;
  }

  const ModelConfig& config() const override { return config_; }
  int64_t version() const override { return version_; }

 private:
  // Wraps each view in place. The router has validated shapes; the checks
  // here are the cheap ones that keep a wrong view from reading out of bounds.
  Status WrapInputs(const std::vector<TensorView>& inputs, std::vector<c10::IValue>* args) const {
    if (inputs.size() != config_.inputs.size()) {
      return Status::InvalidArgument(label_ + ": expected " +
                                     std::to_string(config_.inputs.size()) + " inputs, got " +
                                     std::to_string(inputs.size()));
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      const TensorView& view = inputs[i];
      const TensorSpec& spec = config_.inputs[i];
      const auto scalar = ToScalarType(view.datatype);
      const int64_t numel = Product(view.shape);
      if (!scalar || view.datatype != spec.datatype) {
        return Status::InvalidArgument(label_ + " input '" + spec.name + "': datatype " +
                                       DataTypeName(view.datatype) + ", expected " +
                                       DataTypeName(spec.datatype));
      }
      if (numel < 0 || static_cast<size_t>(numel) * DataTypeSize(view.datatype) != view.bytes) {
        return Status::InvalidArgument(label_ + " input '" + spec.name +
                                       "': " + std::to_string(view.bytes) + " bytes for shape " +
                                       ShapeString(view.shape));
      }
      torch::Tensor t = torch::from_blob(view.data, view.shape, torch::TensorOptions(*scalar));
      // A device other than the CPU cannot read the arena: one copy there,
      // asynchronous on the current stream (DMA straight from the arena when
      // the host registered it; Run() waits for it before answering).
      args->emplace_back(device_.is_cpu() ? t : t.to(device_, *scalar, /*non_blocking=*/true));
    }
    return Status::Ok();
  }

  // Flattens the forward result into one tensor per config output, in order.
  Status MatchOutputs(const c10::IValue& result, std::vector<torch::Tensor>* outputs) const {
    std::vector<c10::IValue> items;
    if (result.isTuple()) {
      const auto& elements = result.toTupleRef().elements();
      items.assign(elements.begin(), elements.end());
    } else if (result.isList()) {
      for (const c10::IValue& v : result.toListRef()) items.push_back(v);
    } else if (result.isGenericDict()) {
      const c10::Dict<c10::IValue, c10::IValue> dict = result.toGenericDict();
      for (const TensorSpec& spec : config_.outputs) {
        auto it = dict.find(c10::IValue(spec.name));
        if (it == dict.end()) {
          return Status::InvalidArgument(label_ + ": returned a dict without output '" + spec.name +
                                         "'");
        }
        items.push_back(it->value());
      }
    } else {
      items.push_back(result);
    }
    if (items.size() != config_.outputs.size()) {
      return Status::InvalidArgument(label_ + ": returned " + std::to_string(items.size()) +
                                     " outputs, config declares " +
                                     std::to_string(config_.outputs.size()));
    }
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].isTensor()) {
        return Status::InvalidArgument(label_ + " output '" + config_.outputs[i].name +
                                       "': not a tensor but " + items[i].tagKind());
      }
      outputs->push_back(items[i].toTensor());
    }
    return Status::Ok();
  }

  // Checks one output against its spec, then copies it once into the sink.
  Status CopyOutput(size_t index, const torch::Tensor& raw, const OutputAllocator& alloc) const {
    const TensorSpec& spec = config_.outputs[index];
    const DataType datatype = FromScalarType(raw.scalar_type());
    if (datatype != spec.datatype) {
      const std::string actual = datatype != DataType::kInvalid
                                     ? DataTypeName(datatype)
                                     : std::string(c10::toString(raw.scalar_type()));
      return Status::InvalidArgument(label_ + " output '" + spec.name + "': datatype " + actual +
                                     ", config declares " + DataTypeName(spec.datatype));
    }
    ES_RETURN_IF_ERROR(CheckOutputShape(spec, raw.sizes()));
    if (!raw.is_cpu()) return CopyDeviceOutput(index, datatype, raw, alloc);
    const torch::Tensor t = raw.to(torch::kCPU).contiguous();
    std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
    const size_t bytes = t.nbytes();
    Status error;
    void* dst = alloc(index, datatype, shape, bytes, &error);
    if (dst == nullptr && bytes > 0) {
      if (!error.ok()) return error;
      return Status::Internal(label_ + " output '" + spec.name + "': no memory for " +
                              std::to_string(bytes) + " bytes");
    }
    if (bytes > 0) std::memcpy(dst, t.data_ptr(), bytes);
    return Status::Ok();
  }

  // A GPU output goes device-to-host once, straight into the memory the sink
  // hands out (the arena), asynchronously on the current stream: no
  // intermediate host tensor. Run() synchronises before answering.
  Status CopyDeviceOutput(size_t index, DataType datatype, const torch::Tensor& raw,
                          const OutputAllocator& alloc) const {
    std::vector<int64_t> shape(raw.sizes().begin(), raw.sizes().end());
    const size_t bytes = raw.nbytes();
    Status error;
    void* dst = alloc(index, datatype, shape, bytes, &error);
    if (dst == nullptr && bytes > 0) {
      if (!error.ok()) return error;
      return Status::Internal(label_ + " output '" + config_.outputs[index].name +
                              "': no memory for " + std::to_string(bytes) + " bytes");
    }
    if (bytes > 0) {
      torch::from_blob(dst, shape, torch::TensorOptions(raw.scalar_type()))
          .copy_(raw, /*non_blocking=*/true);
    }
    return Status::Ok();
  }

  // Rank and fixed dims must be as declared: the router reports the config's
  // shapes as metadata, and clients size their buffers from them.
  Status CheckOutputShape(const TensorSpec& spec, at::IntArrayRef sizes) const {
    const size_t offset = config_.batched() ? 1 : 0;
    bool ok = sizes.size() == spec.dims.size() + offset;
    for (size_t i = 0; ok && i < spec.dims.size(); ++i) {
      ok = spec.dims[i] < 0 || spec.dims[i] == sizes[i + offset];
    }
    if (ok) return Status::Ok();
    std::vector<int64_t> declared = FullShape(config_, spec, -1);
    return Status::InvalidArgument(label_ + " output '" + spec.name + "': shape " +
                                   ShapeString(sizes) + ", config declares " +
                                   ShapeString(declared));
  }

  const ModelConfig config_;
  const int64_t version_;
  const std::string label_;
  const torch::Device device_;
  // forward() is safe to call concurrently for inference; the module is never
  // mutated after Load().
  torch::jit::Module module_;
};

// Device strings come from the server config, so a bad one is the user's
// error, and a CUDA device where LibTorch has none is a deployment problem:
// both are said plainly instead of as LibTorch's dispatcher message.
StatusOr<torch::Device> ParseDevice(const std::string& device, const std::string& label) {
  std::optional<torch::Device> parsed;
  try {
    parsed.emplace(device);
  } catch (const c10::Error&) {
    return Status::InvalidArgument(label + ": bad device '" + device +
                                   "' (expected cpu or cuda:N)");
  }
  if (parsed->is_cuda()) {
    const auto count = static_cast<int64_t>(torch::cuda::device_count());
    if (count == 0) {
      return Status::FailedPrecondition(label + ": device " + device +
                                        " requested, but this LibTorch sees no CUDA device");
    }
    if (parsed->index() >= count) {
      return Status::FailedPrecondition(label + ": device " + device + " requested, but only " +
                                        std::to_string(count) + " CUDA devices are visible");
    }
  } else if (!parsed->is_cpu()) {
    return Status::InvalidArgument(label + ": unsupported device '" + device +
                                   "' (expected cpu or cuda:N)");
  }
  return *parsed;
}

Status CheckLoadable(const ModelConfig& config, const std::string& label) {
  if (config.is_ensemble()) {
    return Status::InvalidArgument(label + ": an ensemble has no TorchScript file to load");
  }
  for (const auto* specs : {&config.inputs, &config.outputs}) {
    for (const TensorSpec& spec : *specs) {
      if (!ToScalarType(spec.datatype)) {
        return Status::InvalidArgument(label + " tensor '" + spec.name +
                                       "': unsupported datatype " + DataTypeName(spec.datatype));
      }
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<ModelRunner>> ModelRunner::Load(const ModelConfig& config, int64_t version,
                                                         const std::string& device) {
  const std::string label = ModelLabel(config, version);
  ES_RETURN_IF_ERROR(CheckLoadable(config, label));
  // Built here rather than with config.ModelPath() to keep this library
  // independent of the YAML loader's translation unit.
  const std::string path = config.directory + "/" + std::to_string(version) + "/model.pt";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return Status::NotFound(label + ": no model file at " + path);
  }
  ES_ASSIGN_OR_RETURN(torch::Device dev, ParseDevice(device, label));
  std::unique_ptr<TorchScriptRunner> runner;
  ES_RETURN_IF_ERROR(CatchTorch(label + " load from " + path, [&]() -> Status {
    torch::jit::Module module = torch::jit::load(path, dev);
    module.eval();
    runner = std::make_unique<TorchScriptRunner>(config, version, dev, std::move(module));
    return Status::Ok();
  }));
  ES_RETURN_IF_ERROR(runner->WarmUp());
  return std::unique_ptr<ModelRunner>(std::move(runner));
}

}  // namespace es
