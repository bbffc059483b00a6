// ensemble-model-host: started by ensemble-server (or ensemble-train), never by hand.
//
// Its command line is all it knows of its configuration (the router's view
// of this host, see host_process.h); the models come later, over the channel.
#include <CLI/CLI.hpp>

#include "common/allocator.h"
#include "common/command_line.h"
#include "model_host/host_process.h"
#include "torch_utils/blas_kernels.h"

int main(int argc, char** argv) {
  es::ConfigureAllocator();  // before this program starts threads of its own
  es::HostOptions options;
  CLI::App app{"ensemble-model-host: one model-host process, spawned and supervised by ensemble-server"};
  app.add_option("--channel-fd", options.channel_fd, "inherited shared-memory channel descriptor")->required();
  app.add_option("--host", options.host.name, "this host's name (for logs)")->required();
  app.add_option("--device", options.host.device, "cpu or cuda:N")->capture_default_str();
  app.add_option("--cpus", options.host.cpu_affinity, "CPUs to pin the process to (comma-separated)")
      ->delimiter(',');
  app.add_option("--threads", options.host.threads, "LibTorch intra-op threads")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--executors", options.host.executors, "executor threads taking requests")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--spin-polls", options.spin_polls, "polls before a waiting side sleeps on its futex")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30))
      ->capture_default_str();
  if (std::optional<int> exit_code = es::ParseCommandLine(app, argc, argv, "ensemble-model-host")) return *exit_code;
  // After the flags (a bad one is then one line), before LibTorch's first
  // BLAS call; the process may run again from the top (blas_kernels.h).
  // Its note waits for the host's logger (which may write JSON lines).
  es::UseTheCpusBlasKernels(argv, es::BlasNote::kDeferred);
  return es::RunModelHost(options);
}
