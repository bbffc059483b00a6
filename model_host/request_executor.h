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
// Thread safety: Execute() is called concurrently by the executor threads;
// the model table is built before they start and is read-only afterwards.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "ipc/channel.h"
#include "ipc/layout.h"
#include "model_host/model_runner.h"

namespace es {

class RequestExecutor {
 public:
  // `channel` must outlive the executor.
  explicit RequestExecutor(ipc::Channel* channel) : channel_(channel) {}

  void AddModel(std::unique_ptr<ModelRunner> runner);
  size_t model_count() const { return models_.size(); }

  // Runs the request and fills `completion` (id, status, outputs or message).
  void Execute(const ipc::RequestDesc& request, ipc::CompletionDesc* completion) const;

 private:
  Status Run(const ipc::RequestDesc& request, ipc::CompletionDesc* completion) const;

  ipc::Channel* channel_;
  std::map<std::string, std::unique_ptr<ModelRunner>> models_;  // by name
};

// Copies `message` (truncated) into the completion's fixed message field.
void SetCompletionMessage(ipc::CompletionDesc* completion, const std::string& message);

}  // namespace es
