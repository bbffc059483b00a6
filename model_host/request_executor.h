// RequestExecutor: turns one RequestDesc read from the channel into one
// CompletionDesc, by running the named model on tensors that stay in the
// arena (read in place, outputs written once into the request's output
// region).
//
// The descriptor comes from another process, so it is distrusted: every
// offset, size, rank and count is checked against the arena and the model's
// config before anything is dereferenced; a bad descriptor becomes an error
// completion for that request, never a wild read or a crash.
//
// Thread safety: Execute() is called concurrently by the executor threads
// while the loader thread (model_loader.h) adds and removes model versions:
// the table is guarded by a mutex held only to look a model up, and each
// Execute() holds its runner by shared_ptr, so a version removed while
// requests run on it is freed when the last of them ends.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "common/mutex.h"
#include "ipc/channel.h"
#include "ipc/layout.h"
#include "model_host/model_runner.h"

namespace es {

class RequestExecutor {
 public:
  // `channel` must outlive the executor.
  explicit RequestExecutor(ipc::Channel* channel) : channel_(channel) {}

  // Adds (or replaces) the runner's model version.
  void AddModel(std::shared_ptr<ModelRunner> runner);
  // Drops a model version; false if it was not loaded. Requests running on
  // it finish first (they hold the runner).
  bool RemoveModel(const std::string& name, int64_t version);
  size_t model_count() const;

  // Runs the request and fills `completion` (id, status, outputs or message).
  void Execute(const ipc::RequestDesc& request, ipc::CompletionDesc* completion) const;

  ipc::Channel* channel() const { return channel_; }

 private:
  using Key = std::pair<std::string, int64_t>;  // model name, version
  Status Run(const ipc::RequestDesc& request, ipc::CompletionDesc* completion) const;
  std::shared_ptr<ModelRunner> Find(const std::string& name, int64_t version) const;

  ipc::Channel* channel_;
  mutable Mutex mu_;
  std::map<Key, std::shared_ptr<ModelRunner>> models_ ABSL_GUARDED_BY(mu_);
};

// The model name of a descriptor (its fixed field, NUL-terminated or full).
std::string RequestModelName(const ipc::RequestDesc& request);

// Copies `message` (truncated) into the completion's fixed message field.
void SetCompletionMessage(ipc::CompletionDesc* completion, const std::string& message);

}  // namespace es
