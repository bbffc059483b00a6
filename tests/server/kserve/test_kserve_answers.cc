// KServeAnswers (server/kserve/kserve_answers.h), in-process on a test
// repository with no hosts running: server metadata (its extensions, system
// shared memory only with a registry), readiness, model metadata, config and
// ready for known and unknown models and versions (NOT_FOUND naming what was
// not found), the repository index and its `ready` filter, load/unload
// refused outside explicit mode (and unknown unload parameters refused), and
// statistics for known and unknown models.
#include "server/kserve/kserve_answers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/common/temp_dir.h"

namespace es {
namespace {

constexpr const char* kServerYaml = R"(repository: repo
hosts:
  - name: cpu0
    device: cpu
)";

// Versions 1 and 3 on disk; the default policy (latest 1) serves 3.
constexpr const char* kMlpYaml = R"(platform: torchscript
max_batch_size: 8
inputs:
  - {name: input, datatype: FP32, dims: [4]}
outputs:
  - {name: probabilities, datatype: FP32, dims: [3]}
)";

constexpr const char* kEnsYaml = R"(platform: ensemble
max_batch_size: 8
ensemble:
  combine: mean
  members:
    - {model: mlp}
)";

class KServeAnswersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_.Write("repo/mlp/config.yaml", kMlpYaml);
    dir_.Write("repo/mlp/1/model.pt", "");
    dir_.Write("repo/mlp/3/model.pt", "");
    dir_.Write("repo/ens/config.yaml", kEnsYaml);
    auto config = LoadServerConfig(dir_.Write("server.yaml", kServerYaml));
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    config_ = std::move(config).value();
  }

  // Builds the collaborators over config_ (after a test changed it), as the
  // router does, with no host supervisors: versions are READY, no model is
  // ready to run.
  void Start(bool with_shm = false) {
    repository_ = std::make_unique<ModelRepository>(&config_);
    ASSERT_TRUE(repository_->Begin({}).ok());
    repository_->Attach({}, [](const std::string&, int64_t) { return int64_t{0}; });
    stats_ = std::make_unique<ModelStatistics>(config_.models);
    core_ = std::make_unique<InferenceCore>(&config_, repository_.get(), std::map<std::string, HostSupervisor*>{},
                                            stats_.get());
    if (with_shm) shm_ = std::make_unique<SharedMemoryRegistry>();
    calls_ = std::make_unique<InferCalls>(&config_, repository_.get(), core_.get(), stats_.get(), nullptr,
                                          shm_.get());
    answers_ = std::make_unique<KServeAnswers>(&config_, repository_.get(), core_.get(), stats_.get(), calls_.get(),
                                               shm_.get());
  }

  void TearDown() override {
    answers_.reset();
    calls_.reset();
    shm_.reset();
    core_.reset();
    stats_.reset();
    repository_.reset();
  }

  // The status a load or unload answered; nullopt if `done` did not run
  // before the call returned (every refusal here is given at once).
  template <typename Request, typename Call>
  std::optional<Status> Control(const Request& request, Call call) {
    std::optional<Status> answer;
    (answers_.get()->*call)(request, [&answer](const Status& s) { answer = s; });
    return answer;
  }

  static std::vector<std::string> Extensions(const inference::ServerMetadataResponse& meta) {
    return {meta.extensions().begin(), meta.extensions().end()};
  }

  static void ExpectNotFoundNaming(const Status& status, const std::string& needle) {
    EXPECT_EQ(status.code(), StatusCode::kNotFound) << status.ToString();
    EXPECT_NE(status.message().find(needle), std::string::npos) << status.message();
  }

  testing::TempDir dir_;
  ServerConfig config_;
  std::unique_ptr<ModelRepository> repository_;
  std::unique_ptr<ModelStatistics> stats_;
  std::unique_ptr<InferenceCore> core_;
  std::unique_ptr<SharedMemoryRegistry> shm_;
  std::unique_ptr<InferCalls> calls_;
  std::unique_ptr<KServeAnswers> answers_;
};

bool Contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

TEST_F(KServeAnswersTest, ServerMetadataNamesTheServerAndItsExtensions) {
  Start();
  inference::ServerMetadataResponse meta;
  answers_->AnswerServerMetadata(&meta);
  EXPECT_EQ(meta.name(), "ensemble-serve");
  EXPECT_FALSE(meta.version().empty());
  const std::vector<std::string> extensions = Extensions(meta);
  for (const char* e : {"model_repository", "model_configuration", "statistics", "ensemble_uncertainty"}) {
    EXPECT_TRUE(Contains(extensions, e)) << e;
  }
  EXPECT_FALSE(Contains(extensions, "system_shared_memory")) << "no registry: the extension must not be announced";
}

TEST_F(KServeAnswersTest, ServerMetadataAnnouncesSystemSharedMemoryWithARegistry) {
  Start(/*with_shm=*/true);
  inference::ServerMetadataResponse meta;
  answers_->AnswerServerMetadata(&meta);
  EXPECT_TRUE(Contains(Extensions(meta), "system_shared_memory"));
}

TEST_F(KServeAnswersTest, ServerIsNotReadyWhileAServedModelHasNoHostUp) {
  Start();
  EXPECT_FALSE(answers_->ServerIsReady()) << "mlp has no host up";
}

TEST_F(KServeAnswersTest, ServerWithoutModelsIsReadyUntilItDrains) {
  config_.models.clear();
  Start();
  EXPECT_TRUE(answers_->ServerIsReady());
  calls_->SetAccepting(false);
  EXPECT_FALSE(answers_->ServerIsReady()) << "a draining server is not ready";
}

TEST_F(KServeAnswersTest, ModelMetadataOfAKnownModelListsItsServedVersionsAndTensors) {
  Start();
  inference::ModelMetadataRequest req;
  req.set_name("mlp");
  inference::ModelMetadataResponse meta;
  ASSERT_TRUE(answers_->AnswerModelMetadata(req, &meta).ok());
  EXPECT_EQ(meta.name(), "mlp");
  EXPECT_EQ(meta.platform(), "pytorch_libtorch");
  ASSERT_EQ(meta.versions_size(), 1);
  EXPECT_EQ(meta.versions(0), "3");
  ASSERT_EQ(meta.inputs_size(), 1);
  EXPECT_EQ(meta.inputs(0).name(), "input");
  EXPECT_EQ(meta.inputs(0).datatype(), "FP32");
  ASSERT_EQ(meta.outputs_size(), 1);
  EXPECT_EQ(meta.outputs(0).name(), "probabilities");

  req.set_name("ens");
  inference::ModelMetadataResponse ens;
  ASSERT_TRUE(answers_->AnswerModelMetadata(req, &ens).ok());
  EXPECT_EQ(ens.platform(), "ensemble");
}

TEST_F(KServeAnswersTest, ModelMetadataOfAServedVersionIsAnswered) {
  Start();
  inference::ModelMetadataRequest req;
  req.set_name("mlp");
  req.set_version("3");
  inference::ModelMetadataResponse meta;
  EXPECT_TRUE(answers_->AnswerModelMetadata(req, &meta).ok());
}

TEST_F(KServeAnswersTest, ModelMetadataOfAnUnknownModelOrVersionIsNotFound) {
  Start();
  inference::ModelMetadataRequest req;
  req.set_name("nope");
  inference::ModelMetadataResponse meta;
  ExpectNotFoundNaming(answers_->AnswerModelMetadata(req, &meta), "'nope'");

  req.set_name("mlp");
  req.set_version("1");  // on disk, not served by the policy
  ExpectNotFoundNaming(answers_->AnswerModelMetadata(req, &meta), "'mlp'");
  req.set_version("x");
  ExpectNotFoundNaming(answers_->AnswerModelMetadata(req, &meta), "'x'");
}

TEST_F(KServeAnswersTest, ModelReadyAnswersForKnownModelsAndNotFoundForUnknownOnes) {
  Start();
  inference::ModelReadyRequest req;
  req.set_name("mlp");
  inference::ModelReadyResponse resp;
  resp.set_ready(true);
  ASSERT_TRUE(answers_->AnswerModelReady(req, &resp).ok());
  EXPECT_FALSE(resp.ready()) << "no host serves it";

  req.set_version("3");
  EXPECT_TRUE(answers_->AnswerModelReady(req, &resp).ok());
  req.set_version("2");
  ExpectNotFoundNaming(answers_->AnswerModelReady(req, &resp), "'mlp'");

  req.set_name("nope");
  req.clear_version();
  ExpectNotFoundNaming(answers_->AnswerModelReady(req, &resp), "'nope'");
}

TEST_F(KServeAnswersTest, ModelConfigAnswersTheConfigOfAKnownModel) {
  Start();
  inference::ModelConfigRequest req;
  req.set_name("mlp");
  inference::ModelConfigResponse resp;
  ASSERT_TRUE(answers_->AnswerModelConfig(req, &resp).ok());
  EXPECT_EQ(resp.config().name(), "mlp");
  EXPECT_EQ(resp.config().max_batch_size(), 8);
  ASSERT_EQ(resp.config().input_size(), 1);
  EXPECT_EQ(resp.config().input(0).name(), "input");

  req.set_name("nope");
  inference::ModelConfigResponse unknown;
  ExpectNotFoundNaming(answers_->AnswerModelConfig(req, &unknown), "'nope'");
  req.set_name("mlp");
  req.set_version("7");
  ExpectNotFoundNaming(answers_->AnswerModelConfig(req, &unknown), "'mlp'");
}

TEST_F(KServeAnswersTest, RepositoryIndexListsEachVersionAndFiltersOnReady) {
  Start();
  inference::RepositoryIndexRequest req;
  inference::RepositoryIndexResponse index;
  answers_->AnswerRepositoryIndex(req, &index);
  std::map<std::string, const inference::RepositoryIndexResponse::ModelIndex*> by_name;
  for (const auto& m : index.models()) by_name[m.name() + "/" + m.version()] = &m;
  ASSERT_EQ(by_name.count("mlp/3"), 1u) << index.DebugString();
  ASSERT_EQ(by_name.count("ens/1"), 1u) << index.DebugString();
  // READY in the repository, but no host serving it is up.
  EXPECT_EQ(by_name["mlp/3"]->state(), "UNAVAILABLE");
  EXPECT_NE(by_name["mlp/3"]->reason().find("no host"), std::string::npos) << by_name["mlp/3"]->reason();
  EXPECT_EQ(by_name["ens/1"]->state(), "UNAVAILABLE");

  req.set_ready(true);
  inference::RepositoryIndexResponse ready;
  answers_->AnswerRepositoryIndex(req, &ready);
  EXPECT_EQ(ready.models_size(), 0) << ready.DebugString();
}

TEST_F(KServeAnswersTest, LoadAndUnloadOutsideExplicitModeAreUnavailableNamingTheFlag) {
  for (ModelControlMode mode : {ModelControlMode::kNone, ModelControlMode::kPoll}) {
    config_.model_control_mode = mode;
    Start();
    inference::RepositoryModelLoadRequest load;
    load.set_model_name("mlp");
    std::optional<Status> loaded = Control(load, &KServeAnswers::LoadModel);
    ASSERT_TRUE(loaded.has_value()) << "refused at once";
    EXPECT_EQ(loaded->code(), StatusCode::kUnavailable) << loaded->ToString();
    EXPECT_NE(loaded->message().find("--model-control-mode explicit"), std::string::npos) << loaded->message();
    EXPECT_NE(loaded->message().find(ModelControlModeName(mode)), std::string::npos) << loaded->message();

    inference::RepositoryModelUnloadRequest unload;
    unload.set_model_name("mlp");
    std::optional<Status> unloaded = Control(unload, &KServeAnswers::UnloadModel);
    ASSERT_TRUE(unloaded.has_value());
    EXPECT_EQ(unloaded->code(), StatusCode::kUnavailable) << unloaded->ToString();
    EXPECT_NE(unloaded->message().find("--model-control-mode explicit"), std::string::npos) << unloaded->message();
    TearDown();
  }
}

TEST_F(KServeAnswersTest, UnloadParametersOtherThanUnloadDependentsAreInvalid) {
  config_.model_control_mode = ModelControlMode::kExplicit;
  Start();
  inference::RepositoryModelUnloadRequest unload;
  unload.set_model_name("mlp");
  (*unload.mutable_parameters())["force"].set_bool_param(true);
  std::optional<Status> answer = Control(unload, &KServeAnswers::UnloadModel);
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->code(), StatusCode::kInvalidArgument) << answer->ToString();
  EXPECT_NE(answer->message().find("'force'"), std::string::npos) << answer->message();

  // The right name with the wrong type is refused too.
  unload.mutable_parameters()->clear();
  (*unload.mutable_parameters())["unload_dependents"].set_string_param("true");
  answer = Control(unload, &KServeAnswers::UnloadModel);
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->code(), StatusCode::kInvalidArgument) << answer->ToString();
}

TEST_F(KServeAnswersTest, LoadParametersAreInvalid) {
  config_.model_control_mode = ModelControlMode::kExplicit;
  Start();
  inference::RepositoryModelLoadRequest load;
  load.set_model_name("mlp");
  (*load.mutable_parameters())["config"].set_string_param("{}");
  std::optional<Status> answer = Control(load, &KServeAnswers::LoadModel);
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->code(), StatusCode::kInvalidArgument) << answer->ToString();
}

TEST_F(KServeAnswersTest, StatisticsOfAKnownModelAreAnsweredAndOfAnUnknownOneNotFound) {
  Start();
  inference::ModelStatisticsRequest req;
  req.set_name("mlp");
  inference::ModelStatisticsResponse stats;
  ASSERT_TRUE(answers_->AnswerModelStatistics(req, &stats).ok());
  ASSERT_GE(stats.model_stats_size(), 1);
  EXPECT_EQ(stats.model_stats(0).name(), "mlp");

  req.set_name("nope");
  inference::ModelStatisticsResponse unknown;
  ExpectNotFoundNaming(answers_->AnswerModelStatistics(req, &unknown), "'nope'");
  req.set_name("mlp");
  req.set_version("9");
  ExpectNotFoundNaming(answers_->AnswerModelStatistics(req, &unknown), "'9'");

  inference::ModelStatisticsRequest every;
  inference::ModelStatisticsResponse all;
  ASSERT_TRUE(answers_->AnswerModelStatistics(every, &all).ok());
  std::vector<std::string> names;
  for (const auto& m : all.model_stats()) names.push_back(m.name());
  EXPECT_TRUE(Contains(names, "mlp"));
  EXPECT_TRUE(Contains(names, "ens"));
}

}  // namespace
}  // namespace es
