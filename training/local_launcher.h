// LaunchLocalRanks: ensemble-train without torchrun's variables. It becomes
// the launcher of a one-machine run, as torchrun's agent would be: it hosts
// the c10d TCPStore (on a free loopback port), spawns one rank per device
// through the model-host launcher (common/launcher.h: the same
// fork/exec, parent-death signal and CPU pinning as model hosts), each rank
// being this same binary with the same flags plus torchrun's variables, and
// watches them.
//
// Several machines (options.nnodes > 1, what torchrun's agent does for a
// static rendezvous): one launcher per machine, each starting its own
// devices' ranks as global ranks node_rank * P + 0..P-1 of nnodes * P (P =
// the number of --devices). Node 0's launcher hosts the store on
// master_port; every rank connects to master_addr:master_port. A launcher
// watches only its own ranks: a node that dies makes the other nodes' ranks
// fail their next collective (at once when its connections close, within
// the collective timeout when it vanished), and their launchers exit 1
// telling the user to run again with --resume on every node.
//
// CPU ranks are pinned to disjoint CPU sets (cpu:N on C CPUs: rank i gets
// CPUs i, i+N, ...; more ranks than CPUs share them round-robin).
//
// Failure: when a rank exits non-zero or dies, the others get the
// collective timeout (plus a grace period) to notice and exit on their own
// (their collectives fail); whoever is still running then is killed. Every
// rank's end is logged, and the exit code is 0 only when all exited 0 (2 when
// the failed ranks all failed on usage, 128 + N after forwarding signal N).
// SIGINT/SIGTERM to the launcher are passed on to the ranks.
//
// Thread safety: called once from main.
#pragma once

#include <string>
#include <vector>

#include "training/train_config.h"
#include "training/train_options.h"

namespace es {

// `argv`: the launcher's own arguments (argv[1..]), given to every rank.
int LaunchLocalRanks(const TrainOptions& options, const TrainConfig& config,
                     const std::vector<std::string>& argv);

}  // namespace es
