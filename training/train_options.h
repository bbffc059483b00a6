// TrainOptions: ensemble-train's command line, parsed once (train_main.cc)
// and shared by the local launcher and every rank, which re-parse the very
// same argv so a rank never sees other settings than its launcher.
//
// Thread safety: a value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace es {

struct TrainOptions {
  std::string config_path;
  std::string devices = "cpu:1";  // cpu:N (N ranks on CPU slots) or cuda:I,J,...
  int epochs = 0;                 // 0: the config's
  std::string out = "trained";
  std::string publish;  // an existing repository the trained models go into as next versions; "" = none
  // With publish: > 0 publishes the run as a candidate of the ensemble
  // serving there, shadowed at this percent (PublishAsCandidate); 0 = no.
  double shadow_percent = 0;
  bool resume = false;
  bool force = false;
  bool no_pack = false;  // write no packed variant (the config's ensemble.pack: false)
  bool pack_training = false;  // train same-architecture members packed (the config's ensemble.pack_training: true)
  int64_t max_steps = 0;    // 0: no limit; else stop (with a checkpoint) after this many steps
  int metrics_port = -1;    // -1: no /metrics; 0: free ports; P: rank r on P + local rank
  std::string metrics_address = "127.0.0.1";
  std::string log_level = "info";
  // Progress when stderr is not a terminal: one log line this often.
  double progress_every_s = 10;
  // A run over several machines (torchrun's static rendezvous): this
  // process launches its node's ranks, node 0 hosting the store on
  // master_port (all addresses), the others' ranks connecting to
  // master_addr. nnodes 1: one machine, the store on a free loopback port.
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr;  // node 0's address as the other nodes reach it
  int master_port = 29500;  // torchrun's default
};

// "cpu:2" -> {"cpu:0", "cpu:1"}; "cuda:0,1" -> {"cuda:0", "cuda:1"}; an error
// naming the flag's value otherwise.
StatusOr<std::vector<std::string>> ParseDevices(const std::string& devices);

// The path of the run's checkpoint in `out`.
std::string CheckpointPath(const std::string& out);

}  // namespace es
