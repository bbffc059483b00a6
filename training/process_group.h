// Rank identity and rendezvous for ensemble-train: who this process is in
// the run, and the c10d process group its collectives go through.
//
// A rank learns its place from torchrun's variables (RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), whether torchrun,
// a scheduler or ensemble-train's own local launcher set them; so one rank
// binary spans machines unchanged. Rendezvous is a c10d TCPStore at
// MASTER_ADDR:MASTER_PORT, hosted by rank 0 unless the launcher hosts it
// (TORCHELASTIC_USE_AGENT_STORE=True, as torchrun and our launcher do), seen
// through a PrefixStore "<run>/<restart>" so a restarted run (or a second run
// on the same store) never reads an earlier one's keys.
//
// The process group is ProcessGroupGloo on CPU, ProcessGroupNCCL on CUDA
// (only in builds against a CUDA LibTorch). Both get the configured timeout,
// so a dead or stuck peer fails a collective with an error instead of
// hanging for torch's default half hour; NCCL's asynchronous error handling
// is on, in the mode that aborts the communicators and lets the waiting call
// throw (the rank then exits 1 saying why) rather than killing the process.
//
// Thread safety: values and factory functions; the returned group is used by
// one training thread (c10d groups are thread-safe for issuing work anyway).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <c10/util/intrusive_ptr.h>

#include "common/status.h"
#include "training/collective_group.h"

namespace c10d {
class Store;
}  // namespace c10d

namespace es {

struct RankEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  bool agent_store = false;  // the launcher hosts the TCPStore, not rank 0
  int restart_count = 0;     // TORCHELASTIC_RESTART_COUNT: part of the store prefix
};

// std::nullopt when none of RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE
// is set (ensemble-train then launches its own ranks; MASTER_ADDR and
// MASTER_PORT alone are a node launcher's); an error naming the variable
// when the set is partial or a value is malformed or out of range.
StatusOr<std::optional<RankEnv>> RankEnvFromEnvironment();

// The variables that make a child process rank `env.rank` (for Spawn()).
std::vector<std::pair<std::string, std::string>> RankEnvironment(const RankEnv& env);

// Connects to (or, on rank 0 without an agent store, hosts) the TCPStore and
// returns it wrapped in the run's PrefixStore. Waits at most `timeout`.
StatusOr<c10::intrusive_ptr<c10d::Store>> Rendezvous(const RankEnv& env, const std::string& run,
                                                     std::chrono::milliseconds timeout);

// The collective group over `store`: "cpu" -> Gloo, "cuda" -> NCCL (the
// caller has made this rank's GPU the current device). Blocks until all
// `world_size` ranks joined or `timeout` passed. Gloo listens on the
// interfaces of GLOO_SOCKET_IFNAME (comma-separated) if set; else on
// loopback when `master_addr` is a loopback address; else on the address of
// this machine's route to master_addr (the one other machines reach it at).
StatusOr<c10::intrusive_ptr<CollectiveGroup>> MakeProcessGroup(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int world_size,
    const std::string& device_kind, const std::string& master_addr,
    std::chrono::milliseconds timeout);

}  // namespace es
