// ensemble-cli's subcommands, each a function of a connected client and its
// arguments that prints its answer on `out` (a table, or JSON with --json)
// and returns the process's exit code:
//
//   0  done (live / ready: the server said yes)
//   1  the call failed: one line "ensemble-cli: CODE: message" on stderr
//      (server unreachable, unknown model, invalid input...), or an input
//      file that cannot be read
//   2  usage error (also for an --input naming no input of the model)
//   3  live / ready: the server answered no
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "clients/api.h"  // gRPC or HTTP (--http): the same calls and protos
#include "clients/security_flags.h"

namespace es::cli {

constexpr int kExitOk = 0, kExitFailed = 1, kExitUsage = 2, kExitNo = 3;

// The flags the client was made with, for the hint a failed call's message
// ends with when the server could not be reached (es::client::ConnectionHint).
// Set once by main before any command runs.
void SetConnectionFlags(const es::client::SecurityFlags& flags);

struct InferArgs {
  std::string model, version;
  std::vector<std::string> inputs;   // NAME=SOURCE, or SOURCE alone for a single-input model
  std::vector<std::string> outputs;  // only these (none = all)
  int64_t batch = 1;                 // rows of random inputs
  int top_k = 3;
  bool plain = false;                // ensembles: do not ask for member outputs and uncertainty
  uint32_t seed = 0;
  std::string id;
  // --streaming: over one ModelStreamInfer stream, `repeat` times (ids ID-0, ID-1...).
  bool streaming = false;
  int repeat = 1;
  // --shm: the inputs go through a system shared-memory region the call
  // creates and registers (unregistered and unlinked when it returns).
  bool shm = false;
};

int Live(const es::client::Api& client, bool json, std::ostream& out);
int Ready(const es::client::Api& client, const std::string& model, bool json, std::ostream& out);
int Index(const es::client::Api& client, bool json, std::ostream& out);
int Metadata(const es::client::Api& client, const std::string& model, const std::string& version, bool json,
             std::ostream& out);
int Stats(const es::client::Api& client, const std::string& model, bool json, std::ostream& out);
int Infer(const es::client::Api& client, const InferArgs& args, bool json, std::ostream& out);

}  // namespace es::cli
