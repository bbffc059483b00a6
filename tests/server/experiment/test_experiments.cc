// Experiments over a run function standing in for the core: which model
// each request runs on, what the client gets, and what is counted.
#include "server/experiment/experiments.h"

#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <set>
#include <vector>

namespace es {
namespace {

ModelConfig Classifier(const std::string& name) {
  ModelConfig m;
  m.name = name;
  m.platform = "torchscript";
  m.max_batch_size = 8;
  m.inputs = {{"input", DataType::kFp32, {4}}};
  m.outputs = {{"probabilities", DataType::kFp32, {2}}};
  m.versions = {1};
  return m;
}

// The run function: records each request and answers at once with the
// model's fixed probabilities (or an error for `failing` models), or keeps
// the done of models in `held` for the test to answer.
struct FakeCore {
  std::map<std::string, std::vector<float>> answers;
  std::set<std::string> failing, held;
  std::vector<std::shared_ptr<const InferRequest>> runs;
  std::deque<InferDone> waiting;

  Experiments::RunFn Fn() {
    return [this](const std::shared_ptr<const InferRequest>& request, InferDone done) {
      runs.push_back(request);
      if (held.count(request->model->name) != 0) return waiting.push_back(std::move(done));
      if (failing.count(request->model->name) != 0) return done(Status::Internal("boom"), InferResponse{});
      InferResponse response;
      const std::vector<float>& p = answers[request->model->name];
      InferOutput out{"probabilities", DataType::kFp32, {1, 2}, std::string(p.size() * sizeof(float), '\0')};
      std::memcpy(out.data.data(), p.data(), out.data.size());
      response.outputs.push_back(std::move(out));
      done(Status::Ok(), std::move(response));
    };
  }
};

class ExperimentsTest : public ::testing::Test, public ModelCatalog {
 protected:
  void SetUp() override {
    models_["serving"] = Classifier("serving");
    models_["twin"] = Classifier("twin");
    models_["other"] = Classifier("other");
    core_.answers = {{"serving", {0.9f, 0.1f}}, {"twin", {0.9f, 0.1f}}, {"other", {0.2f, 0.8f}}};
    experiments_ = std::make_unique<Experiments>(this, core_.Fn());
  }
  const ModelConfig* Find(const std::string& name) const override {
    auto it = models_.find(name);
    return it == models_.end() ? nullptr : &it->second;
  }
  std::vector<int64_t> ReadyVersions(const ModelConfig&) const override { return {1}; }

  std::shared_ptr<InferRequest> Request(const std::string& model = "serving") {
    auto r = std::make_shared<InferRequest>();
    r->model = &models_[model];
    r->inputs.push_back({&models_[model].inputs[0], DataType::kFp32, {1, 4}, input_, sizeof input_, nullptr});
    return r;
  }
  // Runs one request; what the client got (served_by, ok).
  std::pair<std::string, bool> Send(const std::string& sticky = "") {
    std::pair<std::string, bool> got{"unanswered", false};
    experiments_->Run(Request(), sticky, [&got](const Status& s, const InferResponse& r) { got = {r.served_by, s.ok()}; });
    return got;
  }
  ExperimentSpec Spec(ExperimentSpec::Mode mode, const std::string& candidate, double percent) {
    ExperimentSpec spec;
    spec.mode = mode;
    spec.candidate = candidate;
    spec.percent = percent;
    spec.window = 100;
    return spec;
  }

  std::map<std::string, ModelConfig> models_;
  uint8_t input_[16] = {1, 2, 3, 4};
  FakeCore core_;
  std::unique_ptr<Experiments> experiments_;
};

TEST_F(ExperimentsTest, WithoutAnExperimentARequestRunsAsItIs) {
  EXPECT_EQ(Send(), (std::pair<std::string, bool>{"", true}));
  ASSERT_EQ(core_.runs.size(), 1u);
  EXPECT_EQ(core_.runs[0]->model->name, "serving");
  EXPECT_EQ(experiments_->Describe(models_["serving"])["state"], "off");
}

TEST_F(ExperimentsTest, AShadowRunsAShareOnTheCandidateAndTheClientGetsTheModelsAnswer) {
  models_["serving"].experiment = Spec(ExperimentSpec::Mode::kShadow, "other", 50);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(Send(), (std::pair<std::string, bool>{"", true}));
  ASSERT_EQ(core_.runs.size(), 15u);
  int shadows = 0;
  for (const auto& run : core_.runs) {
    if (run->model->name != "other") continue;
    ++shadows;
    EXPECT_NE(run->inputs[0].data, input_) << "a shadow owns a copy of the inputs";
    EXPECT_EQ(std::memcmp(run->inputs[0].data, input_, sizeof input_), 0);
    EXPECT_EQ(run->inputs[0].spec, &models_["other"].inputs[0]);
    EXPECT_EQ(run->requested_outputs, std::vector<std::string>{"probabilities"});
  }
  EXPECT_EQ(shadows, 5);
  const nlohmann::json status = experiments_->Describe(models_["serving"]);
  EXPECT_EQ(status["state"], "running");
  EXPECT_EQ(status["shadowed"], 5);
  const auto& total = status["figures"]["total"];
  EXPECT_EQ(total["compared_requests"], 5);
  EXPECT_EQ(total["agreement"], 0.0);  // 0.9/0.1 against 0.2/0.8
  EXPECT_NEAR(total["mean_abs_diff"].get<double>(), 0.7, 1e-6);
  EXPECT_EQ(total["serving"]["requests"], 5) << "the unshadowed requests are not counted";
}

TEST_F(ExperimentsTest, AnInputInSharedMemoryIsCopiedForTheShadowWhenTheRequestArrives) {
  models_["serving"].experiment = Spec(ExperimentSpec::Mode::kShadow, "twin", 100);
  uint8_t region[16] = {9, 8, 7, 6};
  auto shm_request = [&](bool readable) {
    auto r = Request();
    r->inputs[0].data = nullptr;  // in the client's region: read when submitted
    r->inputs[0].read_into = [&region, readable](uint8_t* dest) {
      if (!readable) return Status::NotFound("shared memory region 'r' is not registered");
      std::memcpy(dest, region, sizeof region);
      return Status::Ok();
    };
    return r;
  };
  int answered = 0;
  experiments_->Run(shm_request(true), "", [&](const Status& s, const InferResponse&) { answered += s.ok(); });
  region[0] = 0;  // the client reuses its region once answered: the shadow kept what was sent
  ASSERT_EQ(core_.runs.size(), 2u);
  EXPECT_EQ(core_.runs[1]->model->name, "twin");
  ASSERT_NE(core_.runs[1]->inputs[0].data, nullptr) << "the shadow owns a copy";
  EXPECT_EQ(core_.runs[1]->inputs[0].data[0], 9);
  EXPECT_EQ(core_.runs[1]->inputs[0].read_into, nullptr);
  // A region that cannot be read: the request runs, unshadowed, counted skipped.
  experiments_->Run(shm_request(false), "", [&](const Status& s, const InferResponse&) { answered += s.ok(); });
  EXPECT_EQ(core_.runs.size(), 3u);
  EXPECT_EQ(answered, 2);
  const nlohmann::json status = experiments_->Describe(models_["serving"]);
  EXPECT_EQ(status["shadowed"], 1);
  EXPECT_EQ(status["skipped"], 1);
}

TEST_F(ExperimentsTest, ShadowsBeyondTheInFlightBoundAreSkipped) {
  models_["serving"].experiment = Spec(ExperimentSpec::Mode::kShadow, "twin", 100);
  core_.held = {"twin"};
  for (int i = 0; i < 10; ++i) EXPECT_EQ(Send(), (std::pair<std::string, bool>{"", true}));
  EXPECT_EQ(core_.waiting.size(), static_cast<size_t>(Experiments::kMaxShadowsInFlight));
  nlohmann::json status = experiments_->Describe(models_["serving"]);
  EXPECT_EQ(status["skipped"], 10 - Experiments::kMaxShadowsInFlight);
  EXPECT_EQ(status["figures"]["total"]["compared_requests"], 0);
  while (!core_.waiting.empty()) {
    InferResponse r;
    r.outputs.push_back({"probabilities", DataType::kFp32, {1, 2}, std::string(8, '\0')});
    std::memcpy(r.outputs[0].data.data(), core_.answers["twin"].data(), 8);
    core_.waiting.front()(Status::Ok(), std::move(r));
    core_.waiting.pop_front();
  }
  status = experiments_->Describe(models_["serving"]);
  EXPECT_EQ(status["figures"]["total"]["compared_requests"], Experiments::kMaxShadowsInFlight);
  EXPECT_EQ(status["figures"]["total"]["agreement"], 1.0);
  core_.held.clear();
  Send();
  EXPECT_EQ(experiments_->Describe(models_["serving"])["shadowed"], Experiments::kMaxShadowsInFlight + 1);
}

TEST_F(ExperimentsTest, ACanaryAnswersItsShareAndKeepsStickyCallersOnOneSide) {
  ExperimentSpec spec = Spec(ExperimentSpec::Mode::kCanary, "twin", 25);
  models_["serving"].experiment = spec;
  int canaried = 0;
  for (int i = 0; i < 100; ++i) canaried += Send().first == "twin";
  EXPECT_EQ(canaried, 25);
  std::map<std::string, std::set<std::string>> sides;
  for (int round = 0; round < 3; ++round) {
    for (int caller = 0; caller < 40; ++caller) {
      const std::string who = "caller-" + std::to_string(caller);
      sides[who].insert(Send(who).first);
    }
  }
  int on_candidate = 0;
  for (const auto& [who, seen] : sides) {
    EXPECT_EQ(seen.size(), 1u) << who << " moved between sides";
    on_candidate += seen.count("twin") != 0;
  }
  EXPECT_GT(on_candidate, 0);
  EXPECT_LT(on_candidate, 40);
}

TEST_F(ExperimentsTest, AFailingCanaryIsAbortedAndAGoodOneIsPromoted) {
  ExperimentSpec spec = Spec(ExperimentSpec::Mode::kCanary, "other", 100);
  spec.gate.abort_error_rate = 0.5;
  core_.failing = {"other"};
  ASSERT_TRUE(experiments_->Set(models_["serving"], spec).ok());
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(Send().second);
  EXPECT_EQ(experiments_->Describe(models_["serving"])["state"], "aborted");
  EXPECT_EQ(Send(), (std::pair<std::string, bool>{"", true})) << "after the abort the model answers";

  spec.candidate = "twin";
  spec.gate.min_compared = 20;
  ASSERT_TRUE(experiments_->Set(models_["serving"], spec).ok());
  const nlohmann::json fresh = experiments_->Describe(models_["serving"]);
  EXPECT_EQ(fresh["state"], "running");
  EXPECT_EQ(fresh["source"], "endpoint");
  for (int i = 0; i < 20; ++i) EXPECT_EQ(Send().first, "twin");
  const nlohmann::json promoted = experiments_->Describe(models_["serving"]);
  EXPECT_EQ(promoted["state"], "promoted");
  ASSERT_EQ(promoted["decisions"].size(), 1u);
  EXPECT_NE(promoted["decisions"][0].get<std::string>().find("20 candidate requests"), std::string::npos);
  EXPECT_EQ(Send().first, "twin");
}

TEST_F(ExperimentsTest, ACandidateThatCannotStandForTheModelIsRefusedOrNotUsed) {
  models_["narrow"] = Classifier("narrow");
  models_["narrow"].outputs[0].dims = {3};
  EXPECT_EQ(experiments_->Set(models_["serving"], Spec(ExperimentSpec::Mode::kShadow, "nowhere", 50)).code(),
            StatusCode::kNotFound);
  const Status narrow = experiments_->Set(models_["serving"], Spec(ExperimentSpec::Mode::kShadow, "narrow", 50));
  EXPECT_EQ(narrow.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(narrow.message().find("outputs differ"), std::string::npos) << narrow.message();
  // From the config, the candidate is looked for when requests come.
  models_["serving"].experiment = Spec(ExperimentSpec::Mode::kCanary, "nowhere", 100);
  EXPECT_EQ(Send(), (std::pair<std::string, bool>{"", true}));
  EXPECT_EQ(experiments_->Describe(models_["serving"])["reason"], "it is not loaded");
}

}  // namespace
}  // namespace es
