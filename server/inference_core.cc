#include "server/inference_core.h"

#include <atomic>
#include <mutex>

#include "server/ensemble_combiner.h"

namespace es {
namespace {

constexpr uint64_t kAlign = ipc::kCacheLine;

// Reads the host's completion into owned outputs named as the config says.
Status CopyOutputs(const ModelConfig& model, const ipc::CompletionDesc& completion, const uint8_t* arena,
                   InferResponse* response) {
  if (completion.num_outputs != model.outputs.size()) {
    return Status::Internal("model '" + model.name + "' returned " + std::to_string(completion.num_outputs) +
                            " output(s), the config declares " + std::to_string(model.outputs.size()));
  }
  response->compute_ns = completion.compute_ns;
  response->outputs.reserve(model.outputs.size());
  for (size_t i = 0; i < model.outputs.size(); ++i) {
    const ipc::TensorDesc& t = completion.outputs[i];
    InferOutput out;
    out.name = model.outputs[i].name;
    out.datatype = static_cast<DataType>(t.datatype);
    out.shape.assign(t.dims, t.dims + std::min<uint32_t>(t.ndim, ipc::kMaxDims));
    out.data.assign(reinterpret_cast<const char*>(arena + t.offset), t.bytes);
    response->outputs.push_back(std::move(out));
  }
  return Status::Ok();
}

// Errors from hosts (e.g. "host 'cpu1' went down") get the model's name in
// front, so every answer names the model it concerns.
Status NameModel(const ModelConfig& model, const Status& status) {
  if (status.ok() || status.message().find("model '" + model.name + "'") != std::string::npos) return status;
  return Status(status.code(), "model '" + model.name + "': " + status.message());
}

// Gathers the members' answers of one ensemble request.
struct EnsembleCall {
  std::shared_ptr<const InferRequest> request;
  InferDone done;
  std::mutex mu;
  std::vector<InferResponse> results;  // GUARDED_BY(mu), one per member
  Status error;                        // GUARDED_BY(mu), the first member error
  std::atomic<size_t> remaining{0};
};

Status CombineMembers(const InferRequest& request, std::vector<InferResponse>& results, InferResponse* out) {
  const ModelConfig& ensemble = *request.model;
  const auto& members = ensemble.ensemble.members;
  std::vector<double> weights;
  for (const auto& m : members) weights.push_back(m.weight);
  for (size_t o = 0; o < ensemble.outputs.size(); ++o) {
    std::vector<const InferOutput*> parts;
    for (const auto& r : results) parts.push_back(&r.outputs[o]);
    auto combined = CombineOutputs(parts, weights, ensemble.ensemble.combine);
    if (!combined.ok()) return combined.status();
    combined->name = ensemble.outputs[o].name;
    if (o == 0 && request.return_uncertainty) {
      auto u = ComputeUncertainty(*combined, parts);
      if (!u.ok()) return u.status();
      out->outputs.push_back(std::move(combined).value());
      out->outputs.push_back(std::move(u->entropy));
      out->outputs.push_back(std::move(u->disagreement));
      continue;
    }
    out->outputs.push_back(std::move(combined).value());
  }
  for (const auto& r : results) out->compute_ns = std::max(out->compute_ns, r.compute_ns);
  if (request.return_member_outputs) {
    for (size_t m = 0; m < members.size(); ++m) {
      for (auto& o : results[m].outputs) {
        o.name = members[m].model + "." + o.name;
        out->outputs.push_back(std::move(o));
      }
    }
  }
  return Status::Ok();
}

}  // namespace

InferenceCore::InferenceCore(const ServerConfig* config, std::map<std::string, HostSupervisor*> hosts)
    : config_(config), hosts_(std::move(hosts)) {}

bool InferenceCore::ModelReady(const ModelConfig& model) const {
  if (model.is_ensemble()) {
    for (const auto& m : model.ensemble.members) {
      const ModelConfig* member = config_->FindModel(m.model);
      if (member == nullptr || !ModelReady(*member)) return false;
    }
    return true;
  }
  for (const auto& h : model.hosts) {
    auto it = hosts_.find(h);
    if (it != hosts_.end() && it->second->ready()) return true;
  }
  return false;
}

std::shared_ptr<HostConnection> InferenceCore::PickHost(const ModelConfig& model, std::string* why_none) const {
  std::shared_ptr<HostConnection> best;
  for (const auto& h : model.hosts) {
    auto it = hosts_.find(h);
    if (it == hosts_.end()) continue;
    auto conn = it->second->connection();
    if (!conn) {
      *why_none += (why_none->empty() ? "" : "; ") + ("host '" + h + "' is down");
      continue;
    }
    if (!best || conn->outstanding() < best->outstanding()) best = std::move(conn);
  }
  return best;
}

uint64_t InferenceCore::OutputCapacity(const ModelConfig& model, int64_t rows) const {
  uint64_t total = 0;
  for (const auto& out : model.outputs) {
    uint64_t bytes = DataTypeSize(out.datatype) * static_cast<uint64_t>(model.batched() ? rows : 1);
    for (int64_t d : out.dims) {
      if (d < 0) {
        bytes = static_cast<uint64_t>(config_->limits.max_output_bytes);
        break;
      }
      bytes *= static_cast<uint64_t>(d);
    }
    total += (bytes + kAlign - 1) / kAlign * kAlign;
  }
  return total;
}

void InferenceCore::Infer(std::shared_ptr<const InferRequest> request, InferDone done) const {
  if (std::chrono::steady_clock::now() >= request->deadline) {
    done(Status::DeadlineExceeded("model '" + request->model->name + "': deadline passed before dispatch"), {});
    return;
  }
  if (request->model->is_ensemble()) {
    RunEnsemble(request, std::move(done));
  } else {
    RunModel(*request->model, request, std::move(done));
  }
}

void InferenceCore::RunModel(const ModelConfig& model, const std::shared_ptr<const InferRequest>& request,
                             InferDone done) const {
  std::string why;
  auto conn = PickHost(model, &why);
  if (!conn) {
    done(Status::Unavailable("model '" + model.name + "' is unavailable: " + why), {});
    return;
  }
  auto shared_done = std::make_shared<InferDone>(std::move(done));
  Status submitted = conn->Submit(
      model.name, model.LatestVersion(), request->inputs, OutputCapacity(model, request->batch_rows()),
      [&model, request, shared_done](const Status& status, const ipc::CompletionDesc* completion,
                                     const uint8_t* arena) {
        InferResponse response;
        Status s = status;
        if (s.ok()) s = CopyOutputs(model, *completion, arena, &response);
        (*shared_done)(NameModel(model, s), std::move(response));
      });
  if (!submitted.ok()) (*shared_done)(NameModel(model, submitted), {});
}

void InferenceCore::RunEnsemble(const std::shared_ptr<const InferRequest>& request, InferDone done) const {
  const auto& members = request->model->ensemble.members;
  auto call = std::make_shared<EnsembleCall>();
  call->request = request;
  call->done = std::move(done);
  call->results.resize(members.size());
  call->remaining.store(members.size());
  for (size_t m = 0; m < members.size(); ++m) {
    const ModelConfig* member = config_->FindModel(members[m].model);
    auto on_member = [call, m, name = members[m].model](const Status& status, InferResponse response) {
      {
        std::lock_guard<std::mutex> lock(call->mu);
        if (!status.ok() && call->error.ok()) {
          call->error = Status(status.code(), "ensemble '" + call->request->model->name + "' member '" + name +
                                                  "': " + status.message());
        }
        call->results[m] = std::move(response);
      }
      if (call->remaining.fetch_sub(1) != 1) return;
      // The last member to answer combines; the others have published their
      // results under the mutex, which this thread has since taken.
      std::lock_guard<std::mutex> lock(call->mu);
      if (!call->error.ok()) {
        call->done(call->error, {});
        return;
      }
      InferResponse combined;
      Status s = CombineMembers(*call->request, call->results, &combined);
      call->done(s, s.ok() ? std::move(combined) : InferResponse{});
    };
    RunModel(*member, request, on_member);
  }
}

}  // namespace es
