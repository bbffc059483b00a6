// HostlessParts: the protocol layer's collaborators (repository, statistics,
// core, inference calls, answers) built as server/router.cc builds them, over
// a test repository, but with no host supervisors: every served version is
// READY and no model is ready to run. Enough to test every answer that needs
// no model to compute, in-process and in milliseconds. The core has no
// composite runner: a composite request that reaches it is UNIMPLEMENTED.
//
//   testing::TempDir dir;
//   HostlessRepository what;
//   what.ensemble = true;
//   StatusOr<ServerConfig> config = WriteHostlessRepository(dir, what);
//   HostlessParts parts(&*config);  // config outlives parts
//   ASSERT_TRUE(parts.started.ok());
//   parts.answers->AnswerServerMetadata(&meta);
#pragma once

#include <map>
#include <memory>
#include <string>

#include "config/server_config.h"
#include "server/core/inference_core.h"
#include "server/core/model_statistics.h"
#include "server/kserve/infer_calls.h"
#include "server/kserve/kserve_answers.h"
#include "server/repository/model_repository.h"
#include "server/shm/shm_registry.h"
#include "tests/common/temp_dir.h"

namespace es {

// A torchscript model with an FP32 [4] input and an FP32 [3] output.
inline constexpr const char* kHostlessMlpYaml = R"(platform: torchscript
max_batch_size: 8
inputs:
  - {name: input, datatype: FP32, dims: [4]}
outputs:
  - {name: probabilities, datatype: FP32, dims: [3]}
)";

// An ensemble of mlp.
inline constexpr const char* kHostlessEnsembleYaml = R"(platform: ensemble
max_batch_size: 8
ensemble:
  combine: mean
  members:
    - {model: mlp}
)";

struct HostlessRepository {
  std::string versions = "1";  // mlp's version folders, e.g. "13" for 1 and 3
  bool ensemble = false;       // also the ensemble `ens` of mlp
  std::string server_extra;    // more server.yaml, e.g. "limits:\n  max_inflight_calls: 2\n"
};

// Writes repo/mlp (and repo/ens) and server.yaml (one CPU host) under `dir`
// and loads the server config.
inline StatusOr<ServerConfig> WriteHostlessRepository(testing::TempDir& dir, const HostlessRepository& what = {}) {
  dir.Write("repo/mlp/config.yaml", kHostlessMlpYaml);
  for (char v : what.versions) dir.Write(std::string("repo/mlp/") + v + "/model.pt", "");
  if (what.ensemble) dir.Write("repo/ens/config.yaml", kHostlessEnsembleYaml);
  return LoadServerConfig(
      dir.Write("server.yaml", "repository: repo\nhosts:\n  - name: cpu0\n    device: cpu\n" + what.server_extra));
}

// Tokens for the front ends' auth tests: one with the infer role, one admin.
inline constexpr const char* kTestInferToken = "infer-token-0123456789";
inline constexpr const char* kTestAdminToken = "admin-token-0123456789";

// Writes a tokens file (auth.tokens_file) holding the two tokens above; its path.
inline std::string WriteTestTokens(const testing::TempDir& dir) {
  return dir.Write("tokens", std::string("infer ") + kTestInferToken + "\nadmin " + kTestAdminToken + "\n");
}

struct HostlessParts {
  // `config` and `shm` (may be null) must outlive the parts. `started` says
  // whether the repository began; the other members are made regardless.
  explicit HostlessParts(const ServerConfig* config, SharedMemoryRegistry* shm = nullptr)
      : repository(std::make_unique<ModelRepository>(config)),
        started(repository->Begin({})),
        stats(std::make_unique<ModelStatistics>(config->models)) {
    repository->Attach({}, [](const std::string&, int64_t) { return int64_t{0}; });
    core = std::make_unique<InferenceCore>(config, repository.get(), std::map<std::string, HostSupervisor*>{},
                                           stats.get());
    calls = std::make_unique<InferCalls>(config, repository.get(), core.get(), stats.get(), nullptr, shm);
    answers = std::make_unique<KServeAnswers>(config, repository.get(), core.get(), stats.get(), calls.get(), shm);
  }

  // Declared in the order they are made, so destroyed in the reverse order.
  std::unique_ptr<ModelRepository> repository;
  Status started;
  std::unique_ptr<ModelStatistics> stats;
  std::unique_ptr<InferenceCore> core;
  std::unique_ptr<InferCalls> calls;
  std::unique_ptr<KServeAnswers> answers;
};

}  // namespace es
