#include "server/kserve/trace_settings_reply.h"

#include <string>
#include <vector>

namespace es {
namespace {

void Answer(const TraceSettings& s, inference::TraceSettingResponse* resp) {
  auto& out = *resp->mutable_settings();
  out.clear();  // the answer is the settings now, whatever `resp` held
  out["trace_level"].add_value(s.timestamps ? "TIMESTAMPS" : "OFF");
  out["trace_rate"].add_value(std::to_string(s.rate));
  out["trace_count"].add_value(std::to_string(s.count));
  out["log_frequency"].add_value(std::to_string(s.log_frequency));
  out["trace_file"].add_value(s.file);
  out["trace_mode"].add_value(s.mode);
}

// The server's settings as an override with every field set.
TraceOverride Whole(const TraceSettings& s) { return {s.timestamps, s.rate, s.count, s.log_frequency}; }

}  // namespace

Status TraceSettingsReply::Update(const inference::TraceSettingRequest& req, inference::TraceSettingResponse* resp) {
  MutexLock lock(&mu_);
  const std::string& model = req.model_name();
  if (!model.empty() && catalog_->Find(model) == nullptr) {
    return Status::NotFound("unknown model '" + model + "' (no trace settings of its own)");
  }
  const TraceSettings current = tracer_->Settings(model);
  TraceOverride updated = model.empty() ? Whole(current) : tracer_->Override(model);
  for (const auto& [name, value] : req.settings()) {
    const std::vector<std::string> values(value.value().begin(), value.value().end());
    // Read-only settings sent back unchanged are no change.
    if ((name == "trace_file" && values == std::vector<std::string>{current.file}) ||
        (name == "trace_mode" && values == std::vector<std::string>{current.mode})) {
      continue;
    }
    ES_RETURN_IF_ERROR(ApplyTraceSetting(name, values, &updated, /*server_level=*/model.empty()));
  }
  // A level that would trace into nothing is refused, not taken silently:
  // where traces go is set when the server starts.
  const bool sets_timestamps = req.settings().count("trace_level") > 0 && updated.timestamps && *updated.timestamps;
  const bool has_output = current.mode == "opentelemetry" ? !current.url.empty() : !current.file.empty();
  if (sets_timestamps && !has_output) {
    return Status::InvalidArgument(
        current.mode == "opentelemetry"
            ? "'trace_level': TIMESTAMPS has nowhere to go: this server was started without a collector URL "
              "(--trace-url, or trace.url in its config)"
            : "'trace_level': TIMESTAMPS has nowhere to go: this server was started without a trace file "
              "(--trace-file, or trace.file in its config)");
  }
  if (!req.settings().empty()) {
    if (model.empty()) {
      TraceSettings server = current;
      server.timestamps = *updated.timestamps;
      server.rate = *updated.rate;
      server.count = *updated.count;
      server.log_frequency = *updated.log_frequency;
      tracer_->SetServer(server);
    } else {
      tracer_->SetModel(model, updated);
    }
  }
  Answer(tracer_->Settings(model), resp);
  return Status::Ok();
}

}  // namespace es
