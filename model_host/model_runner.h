// ModelRunner: one loaded TorchScript model version, executed on behalf of
// requests read from shared memory.
//
// Contract:
// - Load() reads `<dir>/<version>/model.pt`, moves it to the device, calls
//   eval(), and warms it up with two forwards on zeros (variable dims as 1),
//   so the first real request does not pay for lazy initialisation.
// - Run() wraps each input in place (torch::from_blob, no copy), runs forward
//   under inference mode, and copies each output once into the memory that
//   `sink` hands out. Outputs are matched to the config's outputs in order: a
//   single tensor, a tuple/list of tensors, or a dict keyed by output name.
// - On a GPU, inputs are copied to the device and outputs back into the
//   sink's memory asynchronously on the calling thread's current stream
//   (ExecutorDeviceScope gives each executor its own), and Run() synchronises
//   that stream before it returns: once it has, every output byte is in place
//   and no input byte is read any more.
// - Every exception from LibTorch becomes a Status (INTERNAL with the model's
//   message; INVALID_ARGUMENT for outputs that disagree with the config);
//   nothing escapes, so a bad request never ends the host process.
//
// Thread safety: Run() may be called from several executor threads at once
// (torch::jit::Module::forward is re-entrant for inference; on a GPU each
// thread's work stays on its own current stream).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "common/status.h"
#include "model_host/tensor_view.h"

namespace es {

// Hands out destination memory for output `index` of the given type and shape
// and byte size; returns nullptr (and sets *error) when it cannot hold it.
using OutputAllocator = std::function<void*(size_t index, DataType datatype,
                                            const std::vector<int64_t>& shape,
                                            size_t bytes, Status* error)>;

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  // `device` is "cpu" or "cuda:N".
  static StatusOr<std::unique_ptr<ModelRunner>> Load(const ModelConfig& config, int64_t version,
                                                     const std::string& device);

  // `inputs` are in the order of config.inputs, shapes already validated by
  // the router (batch dim included when the model is batched).
  virtual Status Run(const std::vector<TensorView>& inputs, const OutputAllocator& alloc) = 0;

  virtual const ModelConfig& config() const = 0;
  virtual int64_t version() const = 0;
};

}  // namespace es
