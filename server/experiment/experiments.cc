#include "server/experiment/experiments.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <optional>
#include <utility>
#include <vector>

namespace es {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

constexpr size_t kDecisionsKept = 20;

// Whether request number `n` falls in a `percent` share: spread evenly, so
// 10% is every tenth request, not a random tenth.
bool InShare(uint64_t n, double percent) {
  return std::floor(static_cast<double>(n + 1) * percent / 100.0) > std::floor(static_cast<double>(n) * percent / 100.0);
}

bool SameTensors(const std::vector<TensorSpec>& a, const std::vector<TensorSpec>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].datatype != b[i].datatype || a[i].dims != b[i].dims) return false;
  }
  return true;
}

// "" when `candidate` can stand for `model`; else why not.
std::string Incompatibility(const ModelConfig& model, const ModelConfig& candidate) {
  if (model.batched() != candidate.batched()) return "one of the two is batched and the other not";
  if (!SameTensors(model.inputs, candidate.inputs)) return "its inputs differ from the model's";
  if (!SameTensors(model.outputs, candidate.outputs)) return "its outputs differ from the model's";
  if (model.outputs.empty() || model.outputs[0].datatype != DataType::kFp32) {
    return "the model's first output is not FP32 probabilities";
  }
  return "";
}

// The probabilities of `answer`'s output `name` (empty when absent or not FP32).
std::vector<float> Probabilities(const InferResponse& answer, const std::string& name) {
  for (const InferOutput& o : answer.outputs) {
    if (o.name != name || o.datatype != DataType::kFp32 || o.data.size() % sizeof(float) != 0) continue;
    std::vector<float> out(o.data.size() / sizeof(float));
    std::memcpy(out.data(), o.data.data(), o.data.size());
    return out;
  }
  return {};
}

int64_t Classes(const ModelConfig& model) {
  int64_t n = 1;
  for (int64_t d : model.outputs[0].dims) n *= d > 0 ? d : 1;
  return n;
}

// `request` for `candidate`: its inputs borrowed from `request` (the caller
// keeps it alive), or, with `own_inputs`, copied (a shadow outlives the
// client's request; an input in a client's shared-memory region is read
// now, while the region is the client's promise); null when such an input
// cannot be read.
std::shared_ptr<InferRequest> OnCandidate(const ModelConfig& candidate, const InferRequest& request, bool own_inputs) {
  auto out = std::make_shared<InferRequest>();
  out->model = &candidate;
  out->version = candidate.LatestVersion();
  CopyRequestContext(request, out.get());
  out->inputs = request.inputs;
  for (size_t i = 0; i < out->inputs.size(); ++i) {
    InferInput& in = out->inputs[i];
    in.spec = i < candidate.inputs.size() ? &candidate.inputs[i] : nullptr;
    if (!own_inputs) continue;
    auto copy = std::make_unique<uint8_t[]>(std::max<size_t>(in.bytes, 1));
    if (in.data == nullptr && in.bytes > 0) {
      if (!in.read_into || !in.read_into(copy.get()).ok()) return nullptr;
    } else if (in.bytes > 0) {
      std::memcpy(copy.get(), in.data, in.bytes);
    }
    in.data = copy.get();
    in.read_into = nullptr;
    out->shm_scratch.push_back(std::move(copy));
  }
  out->requested_outputs = request.requested_outputs;
  if (candidate.is_ensemble()) {
    out->return_member_outputs = request.return_member_outputs;
    out->return_uncertainty = request.return_uncertainty;
  }
  return out;
}

json SideJson(const ExperimentStats::Side& s) {
  return {{"requests", s.requests}, {"errors", s.errors}, {"error_rate", s.error_rate}, {"p50_ms", s.p50_ms},
          {"p99_ms", s.p99_ms}};
}

json FiguresJson(const ExperimentStats::Figures& f) {
  return {{"compared_requests", f.compared_requests}, {"compared_rows", f.compared_rows},
          {"agreement", f.agreement},                 {"mean_abs_diff", f.mean_abs_diff},
          {"mean_kl", f.mean_kl},                     {"entropy_serving", f.entropy_serving},
          {"entropy_candidate", f.entropy_candidate}, {"serving", SideJson(f.serving)},
          {"candidate", SideJson(f.candidate)}};
}

}  // namespace

class Experiments::Experiment {
 public:
  enum class State { kRunning, kPromoted, kAborted };

  Experiment(std::string model, const ExperimentSpec& spec)
      : model_(std::move(model)), spec_(spec), config_spec_(spec), stats_(spec.window) {}

  const std::string& model() const { return model_; }

  // What Run needs of the experiment, read at once.
  struct View {
    ExperimentSpec spec;
    State state = State::kRunning;
  };
  View Read() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    return {spec_, state_};
  }

  // The config's section of the model now: when it changed, it takes over.
  void SeeConfig(const ExperimentSpec& config) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    if (config == config_spec_) return;
    config_spec_ = config;
    ReplaceLocked(config, /*from_endpoint=*/false);
  }
  void Replace(const ExperimentSpec& spec, const ExperimentSpec& config) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    config_spec_ = config;
    ReplaceLocked(spec, /*from_endpoint=*/true);
  }

  void SetReason(const std::string& reason) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    if (reason_ != reason && !reason.empty()) {
      spdlog::warn("model '{}': experiment's candidate '{}' not used: {}", model_, spec_.candidate, reason);
    }
    reason_ = reason;
  }

  // One request counted; the gate judged.
  void Record(const std::optional<SideRun>& serving, const std::optional<SideRun>& candidate,
              const std::optional<AnswerComparison>& compared) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    stats_.Add(serving, candidate, compared);
    if (state_ != State::kRunning) return;
    const ExperimentVerdict verdict =
        JudgeExperiment(spec_.gate, stats_.Window(), spec_.mode == ExperimentSpec::Mode::kShadow);
    if (verdict.decision == ExperimentVerdict::Decision::kNone) return;
    const bool promote = verdict.decision == ExperimentVerdict::Decision::kPromote;
    state_ = promote ? State::kPromoted : State::kAborted;
    (promote ? promotions : aborts).fetch_add(1, std::memory_order_relaxed);
    const std::string line = std::string(promote ? "promoted" : "aborted") + " candidate '" + spec_.candidate +
                             "': " + verdict.why;
    if (promote) {
      spdlog::info("model '{}': experiment {}", model_, line);
    } else {
      spdlog::warn("model '{}': experiment {}", model_, line);
    }
    decisions_.push_back(line);
    if (decisions_.size() > kDecisionsKept) decisions_.pop_front();
  }

  json ToJson() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    const ExperimentGate& g = spec_.gate;
    return {{"model", model_},
            {"candidate", spec_.candidate},
            {"mode", ExperimentModeName(spec_.mode)},
            {"percent", spec_.percent},
            {"sticky_by", spec_.sticky_by},
            {"window", spec_.window},
            {"gate",
             {{"min_compared", g.min_compared},
              {"min_agreement", g.min_agreement},
              {"max_error_increase", g.max_error_increase},
              {"max_latency_ratio", g.max_latency_ratio},
              {"abort_error_rate", g.abort_error_rate}}},
            {"source", from_endpoint_ ? "endpoint" : "config"},
            {"state", StateLocked()},
            {"reason", reason_},
            {"shadowed", shadowed.load()},
            {"skipped", skipped.load()},
            {"canaried", canaried.load()},
            {"figures", {{"window", FiguresJson(stats_.Window())}, {"total", FiguresJson(stats_.Total())}}},
            {"decisions", std::vector<std::string>(decisions_.begin(), decisions_.end())}};
  }

  Counters Count() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    return {model_,
            spec_.candidate,
            ExperimentModeName(spec_.mode),
            StateLocked(),
            shadowed.load(),
            skipped.load(),
            canaried.load(),
            promotions.load(),
            aborts.load(),
            stats_.Window()};
  }

  std::atomic<uint64_t> requests{0};  // the share counter
  std::atomic<int> shadows_in_flight{0};
  std::atomic<int64_t> shadowed{0}, skipped{0}, canaried{0}, promotions{0}, aborts{0};

 private:
  // "off", "running", "promoted" or "aborted": the status's and metrics' name.
  const char* StateLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    static const char* const kStates[] = {"running", "promoted", "aborted"};
    return spec_.enabled() ? kStates[static_cast<int>(state_)] : "off";
  }

  void ReplaceLocked(const ExperimentSpec& spec, bool from_endpoint) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const bool fresh = spec.candidate != spec_.candidate || spec.mode != spec_.mode || spec.window != spec_.window ||
                       state_ != State::kRunning;
    spec_ = spec;
    from_endpoint_ = from_endpoint;
    reason_.clear();
    if (!fresh) return;
    state_ = State::kRunning;
    stats_ = ExperimentStats(spec.window);
    decisions_.clear();
    // promotions and aborts stay: they count decisions for metrics.
    for (auto* counter : {&shadowed, &skipped, &canaried}) counter->store(0);
    spdlog::info("model '{}': experiment {} with candidate '{}' at {}% ({})", model_, ExperimentModeName(spec.mode),
                 spec.candidate, spec.percent, from_endpoint ? "set through the endpoint" : "from its config");
  }

  const std::string model_;
  Mutex mu_;
  ExperimentSpec spec_ ABSL_GUARDED_BY(mu_);
  ExperimentSpec config_spec_ ABSL_GUARDED_BY(mu_);
  bool from_endpoint_ ABSL_GUARDED_BY(mu_) = false;
  State state_ ABSL_GUARDED_BY(mu_) = State::kRunning;
  std::string reason_ ABSL_GUARDED_BY(mu_);
  ExperimentStats stats_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> decisions_ ABSL_GUARDED_BY(mu_);
};

Experiments::Experiments(const ModelCatalog* catalog, RunFn run) : catalog_(catalog), run_(std::move(run)) {}

std::shared_ptr<Experiments::Experiment> Experiments::For(const ModelConfig& model) {
  if (!model.experiment.enabled() && !any_set_.load(std::memory_order_relaxed)) return nullptr;
  std::shared_ptr<Experiment> experiment;
  {
    MutexLock lock(&mu_);
    auto it = by_model_.find(model.name);
    if (it == by_model_.end()) {
      if (!model.experiment.enabled()) return nullptr;
      it = by_model_.emplace(model.name, std::make_shared<Experiment>(model.name, model.experiment)).first;
    }
    experiment = it->second;
  }
  experiment->SeeConfig(model.experiment);
  return experiment;
}

std::string Experiments::StickyParameter(const ModelConfig& model) {
  std::shared_ptr<Experiment> experiment = For(model);
  return experiment != nullptr ? experiment->Read().spec.sticky_by : "";
}

void Experiments::Run(const std::shared_ptr<const InferRequest>& request, const std::string& sticky_value,
                      InferDone done) {
  const ModelConfig& model = *request->model;
  std::shared_ptr<Experiment> experiment = For(model);
  if (experiment == nullptr) return run_(request, std::move(done));
  const Experiment::View view = experiment->Read();
  const ExperimentSpec& spec = view.spec;
  if (!spec.enabled() || view.state == Experiment::State::kAborted) return run_(request, std::move(done));
  const ModelConfig* candidate = catalog_->Find(spec.candidate);
  const std::string why_not =
      candidate == nullptr ? "it is not loaded" : Incompatibility(model, *candidate);
  experiment->SetReason(why_not);
  if (!why_not.empty()) return run_(request, std::move(done));

  const auto start = Clock::now();
  const auto elapsed_ns = [start] {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count());
  };
  const uint64_t n = experiment->requests.fetch_add(1, std::memory_order_relaxed);
  const bool canary = spec.mode == ExperimentSpec::Mode::kCanary;
  bool to_candidate = view.state == Experiment::State::kPromoted;
  if (canary && !to_candidate) {
    to_candidate = sticky_value.empty()
                       ? InShare(n, spec.percent)
                       : static_cast<double>(std::hash<std::string>{}(sticky_value) % 10000) < spec.percent * 100;
  }
  if (to_candidate) {
    const bool promoted = view.state == Experiment::State::kPromoted;
    if (!promoted) experiment->canaried.fetch_add(1, std::memory_order_relaxed);
    std::shared_ptr<InferRequest> on_candidate = OnCandidate(*candidate, *request, /*own_inputs=*/false);
    run_(on_candidate, [request, experiment, promoted, elapsed_ns, name = candidate->name, done = std::move(done)](
                           const Status& status, InferResponse answer) {
      if (!promoted) experiment->Record(std::nullopt, SideRun{status.ok(), elapsed_ns()}, std::nullopt);
      answer.served_by = name;
      answer.version = 0;  // the version is the candidate's, not one of the model's
      done(status, std::move(answer));  // `request` owns the inputs' bytes until here
    });
    return;
  }
  if (canary || !InShare(n, spec.percent)) {
    run_(request, [experiment, canary, elapsed_ns, done = std::move(done)](const Status& status, InferResponse answer) {
      if (canary) experiment->Record(SideRun{status.ok(), elapsed_ns()}, std::nullopt, std::nullopt);
      done(status, std::move(answer));
    });
    return;
  }
  // Shadowed: both sides run; whichever finishes second compares.
  struct Pair {
    Mutex mu;
    std::optional<SideRun> serving ABSL_GUARDED_BY(mu), candidate ABSL_GUARDED_BY(mu);
    std::vector<float> serving_p ABSL_GUARDED_BY(mu), candidate_p ABSL_GUARDED_BY(mu);
    int pending ABSL_GUARDED_BY(mu) = 2;
  };
  auto pair = std::make_shared<Pair>();
  const std::string output = model.outputs[0].name;
  const int64_t classes = Classes(model);
  const auto finish = [pair, experiment, classes](bool serving_side, SideRun run, std::vector<float> p) {
    MutexLock lock(&pair->mu);
    (serving_side ? pair->serving : pair->candidate) = run;
    (serving_side ? pair->serving_p : pair->candidate_p) = std::move(p);
    if (--pair->pending > 0) return;
    std::optional<AnswerComparison> compared;
    if (pair->serving->ok && pair->candidate->ok) compared = CompareAnswers(pair->serving_p, pair->candidate_p, classes);
    experiment->Record(pair->serving, pair->candidate, compared);
  };
  std::shared_ptr<InferRequest> shadow;
  if (experiment->shadows_in_flight.load() < kMaxShadowsInFlight) {
    shadow = OnCandidate(*candidate, *request, /*own_inputs=*/true);
  }
  if (shadow == nullptr) {
    experiment->skipped.fetch_add(1, std::memory_order_relaxed);
    return run_(request, std::move(done));
  }
  run_(request, [finish, output, elapsed_ns, done = std::move(done)](const Status& status, InferResponse answer) {
    std::vector<float> p = status.ok() ? Probabilities(answer, output) : std::vector<float>{};
    const uint64_t took = elapsed_ns();
    done(status, std::move(answer));  // the client's answer first
    finish(true, SideRun{status.ok(), took}, std::move(p));
  });
  // The candidate's run: after the model's was started, at its lowest
  // priority, asked only for the compared output, untraced, and not
  // cancelled with the client (its figures count).
  shadow->requested_outputs = {output};
  shadow->priority = candidate->dynamic_batching.enabled ? candidate->dynamic_batching.priority_levels : 0;
  shadow->trace = nullptr;
  shadow->cancelled = nullptr;
  experiment->shadowed.fetch_add(1, std::memory_order_relaxed);
  experiment->shadows_in_flight.fetch_add(1);
  const auto shadow_start = Clock::now();
  run_(shadow, [finish, experiment, output, shadow_start](const Status& status, const InferResponse& answer) {
    const auto took = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - shadow_start).count());
    experiment->shadows_in_flight.fetch_sub(1);
    finish(false, SideRun{status.ok(), took}, status.ok() ? Probabilities(answer, output) : std::vector<float>{});
  });
}

Status Experiments::Set(const ModelConfig& model, const ExperimentSpec& spec) {
  if (spec.enabled()) {
    const ModelConfig* candidate = catalog_->Find(spec.candidate);
    if (candidate == nullptr) return Status::NotFound("candidate '" + spec.candidate + "' is not loaded");
    if (std::string why = Incompatibility(model, *candidate); !why.empty()) {
      return Status::InvalidArgument("candidate '" + spec.candidate + "' cannot stand for model '" + model.name +
                                     "': " + why);
    }
  }
  std::shared_ptr<Experiment> experiment;
  {
    MutexLock lock(&mu_);
    auto& slot = by_model_[model.name];
    if (slot == nullptr) slot = std::make_shared<Experiment>(model.name, model.experiment);
    experiment = slot;
    any_set_.store(true);
  }
  experiment->Replace(spec, model.experiment);
  return Status::Ok();
}

nlohmann::json Experiments::Describe(const ModelConfig& model) {
  std::shared_ptr<Experiment> experiment = For(model);
  if (experiment == nullptr) return {{"model", model.name}, {"mode", "off"}, {"state", "off"}};
  return experiment->ToJson();
}

std::vector<Experiments::Counters> Experiments::Snapshot() {
  std::vector<std::shared_ptr<Experiment>> all;
  {
    MutexLock lock(&mu_);
    for (const auto& [name, experiment] : by_model_) all.push_back(experiment);
  }
  std::vector<Counters> out;
  out.reserve(all.size());
  for (const auto& experiment : all) out.push_back(experiment->Count());
  return out;
}

}  // namespace es
