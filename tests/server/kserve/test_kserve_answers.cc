// KServeAnswers (server/kserve/kserve_answers.h), in-process on a test
// repository with no hosts running: server metadata (its extensions, system
// shared memory only with a registry), readiness, model metadata, config and
// ready for known and unknown models and versions (NOT_FOUND naming what was
// not found), the repository index and its `ready` filter, load/unload
// refused outside explicit mode (and unknown load and unload parameters refused), and
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
#include "tests/server/kserve/hostless_parts.h"

namespace es {
namespace {

class KServeAnswersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HostlessRepository what;
    what.versions = "13";
    what.ensemble = true;
    auto config = WriteHostlessRepository(dir_, what);
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    config_ = std::move(config).value();
  }

  // Builds the collaborators over config_ (after a test changed it), as the
  // router does, with no host supervisors: versions are READY, no model is
  // ready to run.
  void Start(bool with_shm = false) {
    if (with_shm) shm_ = std::make_unique<SharedMemoryRegistry>();
    parts_ = std::make_unique<HostlessParts>(&config_, shm_.get());
    ASSERT_TRUE(parts_->started.ok()) << parts_->started.ToString();
  }

  void TearDown() override {
    parts_.reset();
    shm_.reset();
  }

  // The status a load or unload answered; nullopt if `done` did not run
  // before the call returned (every refusal here is given at once).
  template <typename Request, typename Call>
  std::optional<Status> Control(const Request& request, Call call) {
    std::optional<Status> answer;
    (parts_->answers.get()->*call)(request, [&answer](const Status& s) { answer = s; });
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
  std::unique_ptr<HostlessParts> parts_;
  std::unique_ptr<SharedMemoryRegistry> shm_;
};

bool Contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

TEST_F(KServeAnswersTest, ServerMetadataNamesTheServerAndItsExtensions) {
  Start();
  inference::ServerMetadataResponse meta;
  parts_->answers->AnswerServerMetadata(&meta);
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
  parts_->answers->AnswerServerMetadata(&meta);
  EXPECT_TRUE(Contains(Extensions(meta), "system_shared_memory"));
}

TEST_F(KServeAnswersTest, ServerIsNotReadyWhileAServedModelHasNoHostUp) {
  Start();
  EXPECT_FALSE(parts_->answers->ServerIsReady()) << "mlp has no host up";
}

TEST_F(KServeAnswersTest, ServerWithoutModelsIsReadyUntilItDrains) {
  config_.models.clear();
  Start();
  EXPECT_TRUE(parts_->answers->ServerIsReady());
  parts_->calls->SetAccepting(false);
  EXPECT_FALSE(parts_->answers->ServerIsReady()) << "a draining server is not ready";
}

TEST_F(KServeAnswersTest, ModelMetadataOfAKnownModelListsItsServedVersionsAndTensors) {
  Start();
  inference::ModelMetadataRequest req;
  req.set_name("mlp");
  inference::ModelMetadataResponse meta;
  ASSERT_TRUE(parts_->answers->AnswerModelMetadata(req, &meta).ok());
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
  ASSERT_TRUE(parts_->answers->AnswerModelMetadata(req, &ens).ok());
  EXPECT_EQ(ens.platform(), "ensemble");
}

TEST_F(KServeAnswersTest, ModelMetadataOfAServedVersionIsAnswered) {
  Start();
  inference::ModelMetadataRequest req;
  req.set_name("mlp");
  req.set_version("3");
  inference::ModelMetadataResponse meta;
  EXPECT_TRUE(parts_->answers->AnswerModelMetadata(req, &meta).ok());
}

TEST_F(KServeAnswersTest, ModelMetadataOfAnUnknownModelOrVersionIsNotFound) {
  Start();
  inference::ModelMetadataRequest req;
  req.set_name("nope");
  inference::ModelMetadataResponse meta;
  ExpectNotFoundNaming(parts_->answers->AnswerModelMetadata(req, &meta), "'nope'");

  req.set_name("mlp");
  req.set_version("1");  // on disk, not served by the policy
  ExpectNotFoundNaming(parts_->answers->AnswerModelMetadata(req, &meta), "'mlp'");
  req.set_version("x");
  ExpectNotFoundNaming(parts_->answers->AnswerModelMetadata(req, &meta), "'x'");
}

TEST_F(KServeAnswersTest, ModelReadyAnswersForKnownModelsAndNotFoundForUnknownOnes) {
  Start();
  inference::ModelReadyRequest req;
  req.set_name("mlp");
  inference::ModelReadyResponse resp;
  resp.set_ready(true);
  ASSERT_TRUE(parts_->answers->AnswerModelReady(req, &resp).ok());
  EXPECT_FALSE(resp.ready()) << "no host serves it";

  req.set_version("3");
  EXPECT_TRUE(parts_->answers->AnswerModelReady(req, &resp).ok());
  req.set_version("2");
  ExpectNotFoundNaming(parts_->answers->AnswerModelReady(req, &resp), "'mlp'");

  req.set_name("nope");
  req.clear_version();
  ExpectNotFoundNaming(parts_->answers->AnswerModelReady(req, &resp), "'nope'");
}

TEST_F(KServeAnswersTest, ModelConfigAnswersTheConfigOfAKnownModel) {
  Start();
  inference::ModelConfigRequest req;
  req.set_name("mlp");
  inference::ModelConfigResponse resp;
  ASSERT_TRUE(parts_->answers->AnswerModelConfig(req, &resp).ok());
  EXPECT_EQ(resp.config().name(), "mlp");
  EXPECT_EQ(resp.config().max_batch_size(), 8);
  ASSERT_EQ(resp.config().input_size(), 1);
  EXPECT_EQ(resp.config().input(0).name(), "input");

  req.set_name("nope");
  inference::ModelConfigResponse unknown;
  ExpectNotFoundNaming(parts_->answers->AnswerModelConfig(req, &unknown), "'nope'");
  req.set_name("mlp");
  req.set_version("7");
  ExpectNotFoundNaming(parts_->answers->AnswerModelConfig(req, &unknown), "'mlp'");
}

TEST_F(KServeAnswersTest, RepositoryIndexListsEachVersionAndFiltersOnReady) {
  Start();
  inference::RepositoryIndexRequest req;
  inference::RepositoryIndexResponse index;
  parts_->answers->AnswerRepositoryIndex(req, &index);
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
  parts_->answers->AnswerRepositoryIndex(req, &ready);
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
  EXPECT_EQ(answer->message(), "unload parameter 'unload_dependents' must be a bool");
}

// Load parameters are an upload (tests/integration/check_model_upload.py
// uploads for real); what is not one is refused before the repository.
TEST_F(KServeAnswersTest, LoadParametersThatAreNoUploadAreInvalid) {
  config_.model_control_mode = ModelControlMode::kExplicit;
  Start();
  inference::RepositoryModelLoadRequest load;
  load.set_model_name("mlp");
  (*load.mutable_parameters())["config"].set_string_param("{}");
  std::optional<Status> answer = Control(load, &KServeAnswers::LoadModel);
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->code(), StatusCode::kInvalidArgument) << answer->ToString();
  EXPECT_NE(answer->message().find("platform: missing"), std::string::npos) << answer->message();
  load.mutable_parameters()->clear();
  (*load.mutable_parameters())["force"].set_bool_param(true);
  answer = Control(load, &KServeAnswers::LoadModel);
  ASSERT_TRUE(answer.has_value());
  EXPECT_NE(answer->message().find("unknown load parameter 'force'"), std::string::npos) << answer->message();
}

TEST_F(KServeAnswersTest, StatisticsOfAKnownModelAreAnsweredAndOfAnUnknownOneNotFound) {
  Start();
  inference::ModelStatisticsRequest req;
  req.set_name("mlp");
  inference::ModelStatisticsResponse stats;
  ASSERT_TRUE(parts_->answers->AnswerModelStatistics(req, &stats).ok());
  ASSERT_GE(stats.model_stats_size(), 1);
  EXPECT_EQ(stats.model_stats(0).name(), "mlp");

  req.set_name("nope");
  inference::ModelStatisticsResponse unknown;
  ExpectNotFoundNaming(parts_->answers->AnswerModelStatistics(req, &unknown), "'nope'");
  req.set_name("mlp");
  req.set_version("9");
  ExpectNotFoundNaming(parts_->answers->AnswerModelStatistics(req, &unknown), "'9'");

  inference::ModelStatisticsRequest every;
  inference::ModelStatisticsResponse all;
  ASSERT_TRUE(parts_->answers->AnswerModelStatistics(every, &all).ok());
  std::vector<std::string> names;
  for (const auto& m : all.model_stats()) names.push_back(m.name());
  EXPECT_TRUE(Contains(names, "mlp"));
  EXPECT_TRUE(Contains(names, "ens"));
}

}  // namespace
}  // namespace es
