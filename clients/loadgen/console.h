// ensemble-loadgen's terminal: lines on stdout (none with --quiet) and the
// progress line on stderr (only on an interactive terminal), which is
// cleared before any other line is printed; and the lines that open a run.
//
// Contract: one thread prints (the run's); Say flushes every line, so a
// pipe reading the table sees each row as its step ends.
#pragma once

#include <string>
#include <vector>

#include "clients/loadgen/options.h"
#include "clients/loadgen/report.h"

namespace es::loadgen {

class Console {
 public:
  explicit Console(bool quiet);

  // A line on stdout (nothing with --quiet).
  void Say(const std::string& line);
  // Replaces the progress line.
  void Progress(const std::string& line);
  void ClearProgress();

 private:
  bool quiet_;
  bool interactive_;  // stderr is a terminal and not --quiet: the progress line is shown
  bool shown_ = false;
};

// The lines before the table: server and model, the request and how it is
// sent, the sweep and its windows, the units, and the table's header.
std::vector<std::string> RunBanner(const Options& options, const Report& report);

}  // namespace es::loadgen
