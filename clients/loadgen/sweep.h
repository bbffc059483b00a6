// ensemble-loadgen's steps, run on a plan (run_plan.h): the sweep's steps in
// order (its concurrencies, or its rates), each printed as a table row when
// it ends, then the ceiling step. The report gets every step, the run's
// totals (the engine's calls, the server's counters over the run) and the
// ceiling.
//
// Contract: called from one thread, once per plan. A step interrupted
// (*interrupted becomes true) is dropped, except a soak's, and no step
// follows; neither does one after a step that lost the server
// (report.lost_server says where), and then there is no ceiling step.
#pragma once

#include <atomic>
#include <string>

#include "clients/loadgen/console.h"
#include "clients/loadgen/options.h"
#include "clients/loadgen/report.h"
#include "clients/loadgen/run_plan.h"

namespace es::loadgen {

void RunSweep(const Options& options, RunPlan& plan, Console& console, const std::atomic<bool>* interrupted);

// "no request succeeded at concurrency 8" for the first step in which none
// did; "" when every step had a success.
std::string NothingSucceeded(const Report& report);

}  // namespace es::loadgen
