// ensemble-loadgen: closed-loop concurrency sweeps and open-loop request
// rates against any KServe v2 gRPC server; see docs/loadgen.md.
//
// Exit codes: 0 ok; 1 runtime failure (server unreachable, the model rejects
// the request, a step where nothing succeeded, the server lost during the run
// (what succeeded before is still reported), a file not written);
// 2 usage error; 130 interrupted (SIGINT/SIGTERM; the files hold the steps
// finished before it).
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <iostream>
#include <string>
#include <utility>

#include "clients/loadgen/console.h"
#include "clients/loadgen/options.h"
#include "clients/loadgen/report.h"
#include "clients/loadgen/run_plan.h"
#include "clients/loadgen/sweep.h"
#include "common/grpc_process.h"

namespace {

using es::loadgen::Options;

std::atomic<bool> g_interrupted{false};

void OnSignal(int) { g_interrupted.store(true); }

int Fail(const std::string& message, int code = 1) {
  std::fprintf(stderr, "ensemble-loadgen: %s\n", message.c_str());
  return code;
}

// The summary and the files; the exit code: 130 when interrupted, 1 when
// the server was lost, a step had no success or a file was not written.
int ReportRun(const Options& o, const es::loadgen::Report& report, es::loadgen::Console& console) {
  console.ClearProgress();
  if (!o.quiet) std::cout << es::loadgen::Summary(report) << std::flush;
  int exit_code = 0;
  const std::pair<const std::string*, std::string (*)(const es::loadgen::Report&)> files[] = {
      {&o.csv, es::loadgen::CsvText}, {&o.json, es::loadgen::JsonText}, {&o.svg, es::loadgen::SvgText}};
  for (const auto& [path, render] : files) {
    if (path->empty()) continue;
    if (es::Status written = es::loadgen::WriteFile(*path, render(report)); !written.ok()) {
      exit_code = Fail("cannot write " + written.message());
    } else if (!o.quiet) {
      std::cout << "wrote " << *path << "\n";
    }
  }
  if (report.interrupted) return 130;
  if (!report.lost_server.empty()) {
    return Fail("lost the server " + o.server + ": " + report.lost_server + "; " + std::to_string(report.client_ok) +
                " requests had succeeded before");
  }
  if (const std::string none = es::loadgen::NothingSucceeded(report); !none.empty()) return Fail(none);
  return exit_code;
}

int Run(const Options& o, const std::string& command) {
  auto plan = es::loadgen::PlanRun(o, command);
  if (!plan.ok()) {
    return Fail(plan.status().message(), plan.status().code() == es::StatusCode::kInvalidArgument ? 2 : 1);
  }
  es::loadgen::Console console(o.quiet);
  for (const std::string& line : es::loadgen::RunBanner(o, plan->report)) console.Say(line);
  es::loadgen::RunSweep(o, *plan, console, &g_interrupted);
  return ReportRun(o, plan->report, console);
}

}  // namespace

int main(int argc, char** argv) {
  es::TuneGrpcProcess();
  ::signal(SIGPIPE, SIG_IGN);
  Options options;
  switch (es::loadgen::ParseArgs(argc, argv, &options)) {
    case es::loadgen::ParseOutcome::kHelp: return 0;
    case es::loadgen::ParseOutcome::kUsageError: return 2;
    case es::loadgen::ParseOutcome::kOk: break;
  }
  struct sigaction action {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
  std::string command;
  for (int i = 0; i < argc; ++i) {
    if (i > 0) command += " ";
    command += argv[i];
  }
  return Run(options, command);
}
