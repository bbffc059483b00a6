// The seam through which models made of models (ensembles, cascades) plug
// into the core without the core knowing them: the core runs single models
// and offers member calls (MemberCalls); a CompositeRunner (ensemble/) runs a
// composite model's request on top of them. The dependency thus points from
// ensemble/ to core/, never back.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "common/status.h"
#include "config/model_config.h"
#include "server/core/infer_types.h"

namespace es {

// What a composite model may ask of the core.
class MemberCalls {
 public:
  // `version`: the version the member computed on (0: it reached none).
  using MemberDone = std::function<void(int64_t version, const Status&, InferResponse)>;

  virtual ~MemberCalls() = default;

  // One member call: the member's version resolved (the one pinned in the
  // ensemble's config, else its highest ready one), counted in flight,
  // dispatched, and recorded in the member's statistics. `done` runs exactly
  // once, possibly before CallMember returns, else on a completion thread.
  virtual void CallMember(const EnsembleMember& member, const std::shared_ptr<const InferRequest>& request,
                          MemberDone done) = 0;
};

// Runs the requests of composite models (ModelConfig::is_ensemble()).
class CompositeRunner {
 public:
  virtual ~CompositeRunner() = default;

  // `done` runs exactly once, possibly before Run returns. Thread-safe.
  virtual void Run(const std::shared_ptr<const InferRequest>& request, InferDone done) = 0;
};

}  // namespace es
