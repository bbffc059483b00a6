#include "clients/loadgen/console.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "clients/tensor.h"

namespace es::loadgen {
namespace {

// "input FP32 [8,784] (25088 B), ..."
std::string InputsText(const Report& report) {
  std::string inputs;
  for (const auto& in : report.inputs) {
    if (!inputs.empty()) inputs += ", ";
    inputs +=
        in.name + " " + in.datatype + " " + es::client::ShapeText(in.shape) + " (" + std::to_string(in.bytes) + " B)";
  }
  return inputs;
}

// How the requests travel: HTTP connections or gRPC channels, and streams.
std::string TransportText(const Options& o) {
  std::string text = o.http
                         ? std::string(o.rates.empty() ? "HTTP/1.1, one keep-alive connection and thread per slot"
                                                       : "HTTP/1.1, " + std::to_string(std::min(o.max_inflight, 64)) +
                                                             " keep-alive connections, each with its thread")
                         : std::to_string(o.channels) + " channel(s), " + std::to_string(o.threads) + " thread(s)";
  text += ", deadline " + std::to_string(o.timeout_ms) + " ms";
  if (o.streaming) {
    text += o.streams > 0 ? "; ModelStreamInfer, the slots on " + std::to_string(o.streams) + " stream(s)"
                          : "; ModelStreamInfer, one stream per slot";
  }
  return text;
}

// The sweep and its windows.
std::string StepsText(const Options& o, bool open_loop) {
  std::string steps;
  for (size_t i = 0; i < (open_loop ? o.rates.size() : o.concurrency.size()); ++i) {
    steps += ' ';
    steps += open_loop ? std::to_string(static_cast<long long>(o.rates[i])) : std::to_string(o.concurrency[i]);
  }
  const char* mode = open_loop ? (o.poisson ? "open loop, Poisson arrivals, requests/s"
                                             : "open loop, constant rate, requests/s")
                                : "closed loop, concurrency";
  char line[512];
  if (o.requests > 0) {  // every window kept, until the calls are answered
    std::snprintf(line, sizeof line, "  %s:%s; warm-up %.3g s, then %llu calls in windows of %.3g s", mode,
                  steps.c_str(), o.warmup_s, static_cast<unsigned long long>(o.requests), o.duration_s);
  } else if (o.soak_s > 0) {  // every window kept: nothing is checked for stability
    std::snprintf(line, sizeof line, "  %s:%s; warm-up %.3g s, then a soak of %.3g s in windows of %.3g s", mode,
                  steps.c_str(), o.warmup_s, o.soak_s, o.duration_s);
  } else {
    std::snprintf(line, sizeof line, "  %s:%s; warm-up %.3g s, windows of %.3g s until %d agree within %.0f%% (at most %d)",
                  mode, steps.c_str(), o.warmup_s, o.duration_s, o.stable_windows, o.stability * 100,
                  o.max_windows);
  }
  return line;
}

}  // namespace

Console::Console(bool quiet) : quiet_(quiet), interactive_(!quiet && ::isatty(STDERR_FILENO)) {}

void Console::Say(const std::string& line) {
  if (quiet_) return;
  ClearProgress();
  std::cout << line << std::endl;
}

void Console::Progress(const std::string& line) {
  if (!interactive_) return;
  std::fprintf(stderr, "\r\033[K%s", line.c_str());
  std::fflush(stderr);
  shown_ = true;
}

void Console::ClearProgress() {
  if (!interactive_ || !shown_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  shown_ = false;
}

std::vector<std::string> RunBanner(const Options& o, const Report& report) {
  return {
      "ensemble-loadgen " + report.date + ": server " + o.server +
          (report.server_name.empty() ? "" : " (" + report.server_name + " " + report.server_version + ")") +
          ", model " + o.model + (report.model_version.empty() ? "" : " v" + report.model_version) +
          (report.platform.empty() ? "" : " (" + report.platform + ")") + ", batch " + std::to_string(report.batch),
      "  inputs: " + InputsText(report) + "; request " + std::to_string(report.request_bytes) + " B; " +
          TransportText(o),
      "  data: " + (report.data.empty() ? "seeded random, one request sent every time" : report.data),
      StepsText(o, report.open_loop),
      "  latencies and server stage times (srv_us = server success time, queue, c_in/c_infer/c_out = compute "
      "input/infer/output) in us" +
          std::string(o.server_pid > 0 ? "; srv_cpu_us/hosts_cpu_us = CPU per request of the server process " +
                                             std::to_string(o.server_pid) + "/of its model hosts, in core-us"
                                       : ""),
      TableHeader(report.open_loop, o.server_pid > 0, !o.labelled.labels.empty()),
  };
}

}  // namespace es::loadgen
