// ensemble-cli: a command-line KServe v2 client (any KServe v2 server, over gRPC or, with --http, HTTP/REST).
//
//   ensemble-cli [--server HOST:PORT] [--timeout-ms MS] [--json] SUBCOMMAND
//     [--ssl] [--ssl-ca FILE] [--ssl-cert FILE --ssl-key FILE] [--token T | env ENSEMBLE_TOKEN]
//     [--http]   (KServe v2 HTTP/REST; --server is then the HTTP address, default 127.0.0.1:8000)
//     live | ready [MODEL] | index | metadata MODEL | stats [MODEL]
//     infer MODEL [--input [NAME=]SOURCE]... [--batch N] [--output NAME]...
//                 [--top-k K] [--plain] [--seed N] [--id ID] [--streaming [--repeat N]] [--shm]
//
// Exit codes (see commands.h): 0 ok, 1 the call failed, 2 usage error,
// 3 live/ready answered no.
#include <signal.h>

#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>

#include "clients/cli/commands.h"
#include "clients/http_client.h"
#include "clients/security_flags.h"
#include "common/command_line.h"

namespace {

// The infer subcommand and its flags, each writing into `args`.
void AddInferCommand(CLI::App* app, es::cli::InferArgs* args) {
  auto* infer = app->add_subcommand(
      "infer",
      "one ModelInfer call; prints each output (top-k classes of a classifier's rows). Ensembles are asked for\n"
      "their member outputs and uncertainty (entropy, disagreement) unless --plain.");
  infer->add_option("model", args->model, "model name")->required();
  infer->add_option("--model-version", args->version, "version (default: the server's)");
  infer->add_option("--input", args->inputs,
                    "[NAME=]SOURCE, SOURCE one of: random, FILE.npy, FILE.json, json:[...], raw:FILE "
                    "(repeatable; inputs not given are random)");
  infer->add_option("--batch", args->batch, "rows of random inputs (default 1)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  infer->add_option("--output", args->outputs, "ask for this output only (repeatable)");
  infer->add_option("--top-k", args->top_k, "classes shown per row of a classifier output (default 3)")
      ->check(CLI::Range(1, 1000));
  infer->add_flag("--plain", args->plain, "ensembles: do not ask for member outputs and uncertainty");
  infer->add_option("--seed", args->seed, "seed of random inputs (default 0)");
  infer->add_option("--id", args->id, "request id (echoed by the server)");
  // ModelStreamInfer.
  auto* streaming = infer->add_flag("--streaming", args->streaming,
                                    "send over one ModelStreamInfer stream; answers printed as they come, by id");
  infer->add_option("--repeat", args->repeat, "--streaming: send the request N times on the stream (ids ID-0, ...)")
      ->check(CLI::Range(1, 100000))
      ->needs(streaming);
  // System shared memory.
  infer->add_flag("--shm", args->shm,
                  "send the inputs through a shared-memory region (created, registered, then unregistered and "
                  "unlinked); the server must be on this machine");
}

}  // namespace

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  CLI::App app{
      "ensemble-cli: a KServe v2 client (gRPC, or HTTP/REST with --http) for ensemble-server (or any KServe v2 "
      "server).\n"
      "Exit codes: 0 ok, 1 the call failed (message: CODE: text), 2 usage error, 3 live/ready answered no.",
      "ensemble-cli"};
  std::string server = "127.0.0.1:8001";
  int timeout_ms = 30000;
  bool json = false;
  auto* server_option =
      app.add_option("--server", server,
                     "HOST:PORT of the KServe v2 gRPC endpoint (default 127.0.0.1:8001; with --http the HTTP one, "
                     "default 127.0.0.1:8000)");
  app.add_option("--timeout-ms", timeout_ms, "deadline of the call (default 30000)")->check(CLI::Range(1, 3600000));
  app.add_flag("--json", json, "print the answer as JSON");
  es::client::SecurityFlags security;  // --ssl, --ssl-ca, --ssl-cert, --ssl-key, --token (clients/security_flags.h)
  es::client::AddSecurityFlags(&app, &security);
  // KServe v2 HTTP/REST: every subcommand over HTTP/1.1 instead of gRPC.
  bool http = false;
  app.add_flag("--http", http,
               "talk KServe v2 HTTP/REST (Triton's paths, binary tensors) to --server, the HTTP address "
               "(default 127.0.0.1:8000); not with infer --streaming");
  app.require_subcommand(1);
  app.fallthrough();  // --server, --timeout-ms and --json after the subcommand too

  app.add_subcommand("live", "is the server live? (exit 0 yes, 3 no)");
  std::string ready_model;
  app.add_subcommand("ready", "is the server (or MODEL) ready? (exit 0 yes, 3 no)")
      ->add_option("model", ready_model, "a model (default: the server)");
  app.add_subcommand("index", "the models of the repository and their state");
  std::string meta_model, meta_version;
  auto* metadata = app.add_subcommand("metadata", "a model's platform, versions, inputs and outputs");
  metadata->add_option("model", meta_model, "model name")->required();
  metadata->add_option("--model-version", meta_version, "version (default: the server's)");
  std::string stats_model;
  app.add_subcommand("stats", "inference statistics of MODEL (default: every model)")
      ->add_option("model", stats_model, "a model (default: all)");

  es::cli::InferArgs infer_args;
  AddInferCommand(&app, &infer_args);

  if (std::optional<int> exit_code = es::ParseCommandLine(app, argc, argv, "ensemble-cli")) {
    return *exit_code;  // kExitOk after --help, kExitUsage for a bad flag
  }
  // CLI11 reports a subcommand's --help as CallForHelp from its own parse,
  // caught above with the whole app's help; subcommand help is in --help.

  es::client::ClientOptions options;
  options.timeout = std::chrono::milliseconds(timeout_ms);
  es::cli::SetConnectionFlags(security);
  if (es::client::Status s = es::client::ApplySecurityFlags(security, &options); !s.ok()) {
    std::fprintf(stderr, "ensemble-cli: %s\n", s.message().c_str());
    return 2;  // a usage error: the flags named something unusable
  }
  if (http && infer_args.streaming) {
    std::fprintf(stderr, "ensemble-cli: --streaming needs gRPC (ModelStreamInfer): not with --http\n");
    return 2;
  }
  if (http && server_option->count() == 0) server = "127.0.0.1:8000";
  auto made = es::client::MakeApi(server, options, http);  // gRPC, or HTTP with --http
  if (!made.ok()) {
    std::fprintf(stderr, "ensemble-cli: %s\n", made.status().message().c_str());
    return 2;  // an address or TLS material that cannot be used
  }
  const std::unique_ptr<es::client::Api> client = std::move(made).value();
  auto* sub = app.get_subcommands().front();
  const std::string name = sub->get_name();
  if (name == "live") return es::cli::Live(*client, json, std::cout);
  if (name == "ready") return es::cli::Ready(*client, ready_model, json, std::cout);
  if (name == "index") return es::cli::Index(*client, json, std::cout);
  if (name == "metadata") return es::cli::Metadata(*client, meta_model, meta_version, json, std::cout);
  if (name == "stats") return es::cli::Stats(*client, stats_model, json, std::cout);
  return es::cli::Infer(*client, infer_args, json, std::cout);
}
