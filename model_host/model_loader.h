// ModelLoader: the host's side of the control path. Executor threads hand
// it the load, unload and log settings requests they take from the ring
// (ipc::RequestKind); its own thread carries them out one at a time and
// answers each with a status-only completion, so a load (reading model.pt,
// warming it up: seconds) never holds up the executors serving requests.
//
// Load: input 0 of the request is the model's spec (UINT8 bytes in the
// arena, config/host_model_spec.h), checked like anything else that crosses
// from another process; the version is loaded and warmed up on this host's
// device, then added to the executor's table: requests for it find it from
// then on. Unload: the version leaves the table; requests already running
// on it finish first. Unloading a version that is not loaded succeeds (the
// router may retry after a restart). Log settings: input 0 is the text
// common/log_setup.h encodes; the host logs with them from then on.
//
// Thread safety: Enqueue() from any thread; Stop() once, from the thread
// that owns the loader.
#pragma once

#include <atomic>
#include <deque>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "ipc/channel_ends.h"
#include "model_host/request_executor.h"

namespace es {

class ModelLoader {
 public:
  // `end`, `executor` and `stop` outlive the loader; `device` is "cpu" or "cuda:N".
  ModelLoader(ipc::HostEnd* end, RequestExecutor* executor, std::string device, const std::atomic<bool>* stop);
  ~ModelLoader();
  ModelLoader(const ModelLoader&) = delete;
  ModelLoader& operator=(const ModelLoader&) = delete;

  void Enqueue(const ipc::RequestDesc& request);
  // Ends the thread after the request in hand; queued ones are dropped
  // (the host is exiting: the router fails them when it closes the channel).
  void Stop();

 private:
  void Loop();
  Status Carry(const ipc::RequestDesc& request);
  Status Load(const ipc::RequestDesc& request);
  Status ApplyLogSettingsRequest(const ipc::RequestDesc& request);  // kLogSettings

  ipc::HostEnd* end_;
  RequestExecutor* executor_;
  const std::string device_;
  const std::atomic<bool>* stop_;
  Mutex mu_;
  CondVar cv_;
  std::deque<ipc::RequestDesc> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace es
