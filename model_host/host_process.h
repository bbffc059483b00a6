// HostProcess: the body of `ensemble-model-host`, one process per device.
//
// Life cycle (driven by the router through the channel header):
//   attach channel -> pin to the device (CPU affinity / CUDA device, the
//   arena registered with CUDA: device_setup.h) -> load this host's models
//   (eval, warm-up) -> state READY -> executor threads (on a GPU each with a
//   stream of its own) take requests until the router sets stop_requested,
//   or the router dies.
// If loading fails the host writes the reason into the header's host_message,
// sets state FAILED and exits 1, so the router can say why it won't start.
//
// A heartbeat thread bumps the header's heartbeat word every 100 ms and exits
// the process if the router is gone (belt and braces next to PDEATHSIG).
//
// Thread safety: Run() is called once, from main.
#pragma once

#include <string>

namespace es {

struct HostOptions {
  int channel_fd = -1;
  std::string config_path;  // the server config; the host loads its own part
  std::string host_name;
};

// Returns the process exit code.
int RunModelHost(const HostOptions& options);

}  // namespace es
