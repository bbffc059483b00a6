// ModelConfig: one model of the repository, as declared in
// `<repo>/<model>/config.yaml`.
//
// Conventions follow Triton: when max_batch_size > 0 the model is batched and
// `dims` omit the leading batch dimension (metadata reports it as -1); when
// max_batch_size == 0 the dims are the full shape. -1 in dims means "any size".
// An ensemble is a model with platform "ensemble" whose `ensemble` section
// lists members (other models of the same repository), optional weights and
// the combine rule; it has no version folders of its own.
//
// These are plain values, produced once by LoadRepository() and shared
// read-only afterwards.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/datatype.h"
#include "common/status.h"

namespace es {

struct TensorSpec {
  std::string name;
  DataType datatype = DataType::kInvalid;
  std::vector<int64_t> dims;  // without the batch dim when batched; -1 = variable
};

enum class CombineRule { kMean, kWeightedMean, kMajorityVote, kCascade };
const char* CombineRuleName(CombineRule rule);

struct EnsembleMember {
  std::string model;    // name of another (non-ensemble) model of the repository
  double weight = 1.0;  // used by weighted_mean; normalised over members
  int64_t version = 0;  // the member's version to run; 0 = its highest ready one
  // A packed member: one model that answers for several members in one call
  // (e.g. ensemble-train's packed network), each of its outputs shaped
  // [batch, M, ...] with member k's answer at [:, k]. `packed` names the M
  // members in that order, and each counts as a member of the ensemble: in
  // the combination, weights, quorum, uncertainty and member outputs (named
  // "<name>.<output>" as a separate member's are). `packed_weights` are
  // their weights (empty: `weight` for each). Empty `packed`: a plain member.
  std::vector<std::string> packed = {};
  std::vector<double> packed_weights = {};

  // The members this entry stands for: 1, or the packed count.
  size_t Count() const { return packed.empty() ? 1 : packed.size(); }
  // Member k (< Count()) of this entry: its name and weight.
  const std::string& NameOf(size_t k) const { return packed.empty() ? model : packed[k]; }
  double WeightOf(size_t k) const { return packed_weights.empty() ? weight : packed_weights[k]; }
  bool operator==(const EnsembleMember&) const = default;
};

struct EnsembleSpec {
  std::vector<EnsembleMember> members;
  CombineRule combine = CombineRule::kMean;
  // Admission limit: requests of this ensemble in flight at once; more get
  // RESOURCE_EXHAUSTED, so a slow member cannot make memory grow without bound.
  int64_t max_in_flight = 1024;
  // Degraded quorum: the ensemble answers from the members that succeeded
  // when at least this many did (weights re-normalised over them); 0 = all
  // members (any member's failure fails the request).
  int64_t min_members = 0;
  // A member slower than this (from the fan-out) is not waited for once the
  // quorum is met without it; 0 = wait for every member.
  int64_t member_timeout_ms = 0;

  // combine: cascade (early exit): members run stage by stage, cheapest
  // first (a packed entry's members in one stage); after each stage a row's
  // answer is the mean of the members run on it so far, and the row leaves
  // when that answer's top-class probability is at least exit_threshold (or
  // when every stage ran). Later stages see only the rows still undecided.
  // Stages hold indexes into `members`, each member in exactly one stage;
  // default one per stage in member order.
  std::vector<std::vector<size_t>> stages;
  double exit_threshold = 1.0;

  bool cascade() const { return combine == CombineRule::kCascade; }
  // The ensemble's members, a packed entry counting as its packed members.
  size_t MemberCount() const {
    size_t n = 0;
    for (const EnsembleMember& m : members) n += m.Count();
    return n;
  }
  // min_members with its default resolved: the members needed for an answer.
  size_t Quorum() const { return min_members > 0 ? static_cast<size_t>(min_members) : MemberCount(); }
};

// Overload ladder of an ensemble: ever cheaper ways to answer, each a model
// of the repository with the ensemble's inputs and outputs, richest first
// (rung 0 is the ensemble itself). Past capacity the router serves a request
// at the richest rung whose predicted latency meets latency_target_ms
// (server/ensemble/overload_controller.h); a request's own deadline may pick
// a cheaper rung; parameter `exact: true` always gets rung 0.
//
// A cascade rung may carry its own exit_threshold: one cascade model then
// serves as several rungs, each threshold a point of its accuracy/cost trade.
struct OverloadRung {
  std::string model;
  double accuracy = -1;        // held-out accuracy (e.g. from ensemble-train's report); < 0 = not known
  double exit_threshold = 0;   // > 0: the cascade answers with this threshold in place of its config's
  // What answers and metrics call the rung: the model, and `@threshold`
  // when the rung sets one ("fmnist_ensemble_cascade@0.85").
  std::string label() const;
  bool operator==(const OverloadRung&) const = default;
};
struct OverloadSpec {
  double latency_target_ms = 0;  // the p99 the ensemble keeps
  std::vector<OverloadRung> ladder;
  // The least time between a move down and the next move up: the ladder
  // never oscillates faster than this.
  int64_t dwell_ms = 1000;
  // Requests below the highest priority (1) move down when their predicted
  // latency passes this share of the target, so the highest keep richer
  // rungs longer.
  double lower_priority_share = 0.8;

  bool enabled() const { return !ladder.empty(); }
  bool operator==(const OverloadSpec&) const = default;
};

// An experiment: a candidate (another model of the repository with the same
// inputs and outputs, e.g. a retrained ensemble) served beside the model
// and compared with it on real traffic (server/experiment/experiments.h).
//   shadow: a share of requests is also run on the candidate, after the
//           model's own run was started and at its lowest priority; the
//           client always gets the model's answer, the candidate's is
//           compared and dropped;
//   canary: a share of requests is answered by the candidate; `sticky_by`
//           names a request parameter (else an HTTP header or gRPC metadata
//           entry) whose value keeps a caller on one side.
// The gate promotes the candidate (it then answers every request) once
// `min_compared` requests are in the window and agreement, error rate and
// p99 are within bounds; the candidate's error rate over
// `abort_error_rate` stops the experiment at once.
struct ExperimentGate {
  int64_t min_compared = 0;         // 0 = never promote automatically
  double min_agreement = 0.99;      // top-1 agreement over the window
  double max_error_increase = 0;    // candidate error rate - the model's, at most
  double max_latency_ratio = 1.5;   // candidate p99 / the model's p99, at most
  double abort_error_rate = 0.5;    // candidate error rate (over 10 requests or more) that aborts
  bool operator==(const ExperimentGate&) const = default;
};
struct ExperimentSpec {
  enum class Mode { kOff, kShadow, kCanary };
  std::string candidate;
  Mode mode = Mode::kOff;
  double percent = 0;       // share of requests, 0 .. 100
  std::string sticky_by;    // canary: a request parameter (else header / metadata) keeping a caller on one side
  int64_t window = 1000;    // requests the sliding figures cover
  ExperimentGate gate;
  bool enabled() const { return mode != Mode::kOff && !candidate.empty(); }
  bool operator==(const ExperimentSpec&) const = default;
};
const char* ExperimentModeName(ExperimentSpec::Mode mode);  // off, shadow, canary
// An experiment given as text (YAML or JSON, the fields of config.yaml's
// `experiment:` section) for `model`, e.g. the body of a request that sets
// one; errors name `where` and the field.
StatusOr<ExperimentSpec> ParseExperimentText(const std::string& text, const std::string& model,
                                             const std::string& where);

// The router's dynamic batcher for one model (Triton's semantics): requests
// queue per priority level; a batch is sent when it holds max_batch_size
// rows, or its oldest request has waited max_queue_delay_us, as soon as a
// host slot (an executor of a host serving the model) is free. Preferred
// sizes trim a batch to the largest preferred size it can fill.
struct DynamicBatching {
  bool enabled = false;                        // the `dynamic_batching:` section is present
  int64_t max_queue_delay_us = 0;
  std::vector<int64_t> preferred_batch_sizes;  // ascending
  int64_t max_queue_size = 1024;               // queued requests; more: RESOURCE_EXHAUSTED
  int priority_levels = 2;                     // request parameter `priority`: 1 (highest) .. levels
  int default_priority = 2;                    // for requests without one
  // Bytes of input the queue may hold at once; a request that would pass it
  // gets RESOURCE_EXHAUSTED, as when max_queue_size requests wait.
  int64_t max_queue_bytes = int64_t{256} << 20;
};

// Which version folders of a model are served (Triton's version_policy):
// the newest `num_versions`, all of them, or the ones listed.
struct VersionPolicy {
  enum class Kind { kLatest, kAll, kSpecific };
  Kind kind = Kind::kLatest;
  int64_t num_versions = 1;       // kLatest
  std::vector<int64_t> versions;  // kSpecific: ascending, no repeats

  // The versions of `available` (ascending) that this policy serves, ascending.
  std::vector<int64_t> Select(const std::vector<int64_t>& available) const;
};

struct ModelConfig {
  std::string name;        // the folder name; `name:` in the YAML must match if given
  std::string platform;    // "torchscript" or "ensemble"
  std::string directory;   // absolute path of <repo>/<model>
  int64_t max_batch_size = 0;
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  std::vector<int64_t> versions;     // numeric version folders holding model.pt, ascending
  VersionPolicy version_policy;      // which of `versions` are served
  std::vector<std::string> hosts;    // host names that serve it (torchscript only)
  int instances_per_host = 1;        // executor instances per host
  // Execution limit of one request (batch) on a host; 0 = limits.max_compute_ms.
  int64_t max_compute_ms = 0;
  DynamicBatching dynamic_batching;  // torchscript models with max_batch_size > 0
  // `response_cache: {enable: true}` (torchscript models): answers kept in
  // the server's response cache (server/core/response_cache.h).
  bool response_cache = false;
  EnsembleSpec ensemble;             // only for platform == "ensemble"
  OverloadSpec overload;             // ensembles only; empty ladder = none
  ExperimentSpec experiment;         // `experiment:`; mode off = none
  // The name the hosts hold this config's versions under; "" = `name`. A
  // config.yaml change that alters what a version computes is loaded under
  // a new one ("mlp@2") beside the old, so requests already given to the
  // old config finish on it (server/repository/model_repository.h).
  std::string host_key;

  bool is_ensemble() const { return platform == "ensemble"; }
  const std::string& HostKey() const { return host_key.empty() ? name : host_key; }
  bool batched() const { return max_batch_size > 0; }
  // "<directory>/<version>/model.pt"
  std::string ModelPath(int64_t version) const;
  // Ensembles have no version folders; like Triton they are served as version 1.
  int64_t LatestVersion() const { return versions.empty() ? (is_ensemble() ? 1 : 0) : versions.back(); }
  // The versions the policy serves, ascending ({1} for an ensemble).
  std::vector<int64_t> ServedVersions() const;
};

}  // namespace es
