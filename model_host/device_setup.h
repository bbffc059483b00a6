// Binding a host process and its executor threads to the host's device.
//
// SetUpDevice: before models load: LibTorch's intra-op thread count from the
// host config, and on "cuda:N" the current CUDA device (an error when this
// LibTorch has no CUDA or N is not a visible GPU).
//
// ArenaRegistration: a CUDA host registers its channel's tensor arena with
// the CUDA driver (page-locked, cudaHostRegister), so inputs are copied to the
// GPU straight out of the arena and outputs straight back into it, as
// asynchronous DMA on the executor's stream, with no staging copy. Refused
// registration is logged and not fatal: copies then go through the driver's
// own staging (slower, still correct). ES_CUDA_REGISTER_ARENA=0 in the
// environment turns it off, to measure the difference. Nothing on CPU hosts
// or in builds against a CPU-only LibTorch.
//
// ExecutorDeviceScope: held by each executor thread for its whole life. On a
// CUDA host it makes the host's GPU the thread's current device and a CUDA
// stream of its own (from LibTorch's stream pool) the thread's current stream,
// so a host's executors copy and compute concurrently instead of queueing on
// the default stream, and each request's copies, kernels and the final
// synchronisation (ModelRunner::Run) stay on its executor's stream. Nothing
// on CPU hosts.
//
// Thread safety: SetUpDevice and ArenaRegistration::ForHost run once on the
// main thread; an ExecutorDeviceScope belongs to the thread that made it.
#pragma once

#include <memory>
#include <string>

#include "config/server_config.h"
#include "common/status.h"
#include "ipc/channel.h"

namespace es {

Status SetUpDevice(const HostConfig& host);

class ArenaRegistration {
 public:
  // Registers `channel`'s arena when `host` is a CUDA host (see above); the
  // channel must outlive the returned object. `*note` says what was done.
  static ArenaRegistration ForHost(const HostConfig& host, ipc::Channel* channel, std::string* note);

  ArenaRegistration();
  ArenaRegistration(ArenaRegistration&&) noexcept;
  ArenaRegistration& operator=(ArenaRegistration&&) noexcept;
  ~ArenaRegistration();  // unregisters

  bool registered() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class ExecutorDeviceScope {
 public:
  // `device` is the host's ("cpu" or "cuda:N"); on CUDA, `*note` (when given)
  // names the stream taken, or why the default stream is used instead.
  explicit ExecutorDeviceScope(const std::string& device, std::string* note = nullptr);
  ExecutorDeviceScope(const ExecutorDeviceScope&) = delete;
  ExecutorDeviceScope& operator=(const ExecutorDeviceScope&) = delete;
  ~ExecutorDeviceScope();  // restores the thread's previous device and stream

 private:
  struct Guard;
  std::unique_ptr<Guard> guard_;
};

}  // namespace es
