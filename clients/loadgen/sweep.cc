#include "clients/loadgen/sweep.h"

#include <cstdint>
#include <utility>

#include "clients/loadgen/measure.h"

namespace es::loadgen {
namespace {

StepSettings StepSettingsOf(const Options& o, int64_t batch) {
  StepSettings settings;
  settings.model = o.model;
  settings.version = o.model_version;
  settings.batch = batch;
  CopyWindowOptions(o, &settings);
  settings.run_s = o.soak_s;
  settings.requests = o.requests;
  settings.server_pid = o.server_pid;
  return settings;
}

// Step i of the sweep: a rate (open loop) or a concurrency.
LoadPlan StepPlan(const Options& o, size_t i) {
  LoadPlan plan;
  if (!o.rates.empty()) {
    plan.rate = o.rates[i];
  } else {
    plan.concurrency = o.concurrency[i];
  }
  plan.poisson = o.poisson;
  plan.max_inflight = o.max_inflight;
  plan.seed = o.seed + static_cast<uint32_t>(i);
  return plan;
}

// "rate 100/s" or "concurrency 8".
std::string StepName(const StepResult& step) {
  return step.open_loop ? "rate " + std::to_string(static_cast<long long>(step.rate)) + "/s"
                        : "concurrency " + std::to_string(step.concurrency);
}

ProgressFn ProgressOn(Console& console) {
  return [&console](const std::string& line) { console.Progress(line); };
}

void RunSteps(const Options& o, const StepSettings& settings, RunPlan& plan, Console& console,
              const std::atomic<bool>* interrupted) {
  Report& report = plan.report;
  const size_t steps = report.open_loop ? o.rates.size() : o.concurrency.size();
  for (size_t i = 0; i < steps && !interrupted->load(); ++i) {
    StepResult step = RunStep(*plan.engine, *plan.client, StepPlan(o, i), plan.main_requests, settings,
                              ProgressOn(console), interrupted);
    // An interrupted step is not reported, except a soak's: its windows are
    // what the run is for.
    if (step.windows == 0 || (interrupted->load() && !step.soak)) break;
    console.Say(TableRow(step, o.server_pid > 0));
    report.steps.push_back(std::move(step));
    const StepResult& done = report.steps.back();
    if (!done.lost_server.empty()) {  // the server is gone: no further step, report what succeeded
      report.lost_server = done.lost_server + " (at " + StepName(done) + ")";
      break;
    }
  }
}

// The ceiling model at --ceiling-concurrency, with the sweep's windows.
void RunCeiling(const Options& o, StepSettings settings, RunPlan& plan, Console& console,
                const std::atomic<bool>* interrupted) {
  LoadPlan load;
  load.concurrency = o.ceiling_concurrency;
  load.seed = o.seed;
  settings.model = plan.ceiling_model;
  settings.version = "";
  settings.batch = plan.ceiling_request.rows;
  // By time, as a sweep's step: --requests counts the measured model's rows,
  // and N calls of a trivial model say no more than a few windows of them.
  settings.requests = 0;
  StepResult step =
      RunStep(*plan.engine, *plan.client, load, plan.ceiling_requests, settings, ProgressOn(console), interrupted);
  if (step.windows > 0 && !interrupted->load()) plan.report.ceiling = std::move(step);
}

}  // namespace

void RunSweep(const Options& o, RunPlan& plan, Console& console, const std::atomic<bool>* interrupted) {
  Engine& engine = *plan.engine;
  Report& report = plan.report;
  const StepSettings settings = StepSettingsOf(o, report.batch);
  const auto counters_before = ReadServerCounters(*plan.client, o.model, o.model_version);
  const uint64_t sent_before = engine.total_sent(), ok_before = engine.total_ok();
  const uint64_t failed_before = engine.total_failed();
  RunSteps(o, settings, plan, console, interrupted);
  report.client_sent = engine.total_sent() - sent_before;
  report.client_ok = engine.total_ok() - ok_before;
  report.client_failed = engine.total_failed() - failed_before;
  report.client_hung = engine.total_hung();
  report.client_unanswered = engine.total_unanswered();
  for (const auto& [code, count] : engine.total_errors()) report.client_errors[es::client::CodeName(code)] += count;
  for (const auto& [code, message] : engine.first_error_messages()) {
    report.client_error_messages[es::client::CodeName(code)] = message;
  }
  const auto counters_after = ReadServerCounters(*plan.client, o.model, o.model_version);
  if (counters_before && counters_after) {
    report.server_success_delta = counters_after->success_count - counters_before->success_count;
    report.server_fail_delta = counters_after->fail_count - counters_before->fail_count;
  }
  if (!plan.ceiling_model.empty() && !report.ceiling_is_this_run && !interrupted->load() &&
      report.lost_server.empty()) {
    RunCeiling(o, settings, plan, console, interrupted);
  }
  report.interrupted = interrupted->load();
}

std::string NothingSucceeded(const Report& report) {
  for (const StepResult& step : report.steps) {
    if (step.ok == 0) return "no request succeeded at " + StepName(step);
  }
  return "";
}

}  // namespace es::loadgen
