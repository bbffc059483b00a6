// ensemble-model-host: started by ensemble-server (or ensemble-train), never by hand.
#include <CLI/CLI.hpp>

#include "common/command_line.h"
#include "model_host/blas_kernels.h"
#include "model_host/host_process.h"

int main(int argc, char** argv) {
  es::UseTheCpusBlasKernels(argv);
  es::HostOptions options;
  CLI::App app{"ensemble-model-host: one model-host process, spawned and supervised by ensemble-server"};
  app.add_option("--channel-fd", options.channel_fd, "inherited shared-memory channel descriptor")->required();
  app.add_option("--config", options.config_path, "the server config file")->required();
  app.add_option("--host", options.host_name, "which host of the config this process is")->required();
  if (std::optional<int> exit_code = es::ParseCommandLine(app, argc, argv, "ensemble-model-host")) return *exit_code;
  return es::RunModelHost(options);
}
