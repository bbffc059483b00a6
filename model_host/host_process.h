// HostProcess: the body of `ensemble-model-host`, one process per device.
//
// Life cycle (driven by the router through the channel):
//   attach channel -> pin to the device (CPU affinity / CUDA device, the
//   arena registered with CUDA: device_setup.h) -> state READY -> executor
//   threads (on a GPU each with a stream of its own) take requests until
//   the router sets stop_requested, or the router dies.
// A host starts with no model: the router loads and unloads model versions
// with control requests on the ring (ipc::RequestKind), carried out by the
// ModelLoader's thread. Everything a host knows comes from its command line
// (the router's view of this host's config) and from those requests: it
// reads no config file and no repository folder, only the model.pt files it
// is told to load, so after a restart it holds exactly what the router gives it.
// If setting up fails the host writes the reason into the header's
// host_message, sets state FAILED and exits 1, so the router can say why it
// won't start.
//
// A heartbeat thread bumps the header's heartbeat word every 100 ms and exits
// the process if the router is gone (belt and braces next to PDEATHSIG).
//
// Thread safety: Run() is called once, from main.
#pragma once

#include <cstdint>
#include <string>

#include "config/server_config.h"

namespace es {

struct HostOptions {
  int channel_fd = -1;
  HostConfig host;               // name, device, cpu_affinity, threads, executors
  int64_t spin_polls = 100;      // the server's limits.channel_spin_polls
};

// Returns the process exit code.
int RunModelHost(const HostOptions& options);

}  // namespace es
