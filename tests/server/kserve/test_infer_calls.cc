// InferCalls (server/kserve/infer_calls.h), in-process and without hosts:
// admission under limits.max_inflight_calls (RESOURCE_EXHAUSTED beyond it,
// the place given back once the last copy of a Place goes), draining
// (accepting() false refuses calls), a request for an unknown model answered
// NOT_FOUND, a request that does not decode answered INVALID_ARGUMENT before
// it reaches the core, and the run ending (WaitForInFlight) for refused and
// answered calls.
#include "server/kserve/infer_calls.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "tests/common/temp_dir.h"
#include "tests/server/kserve/hostless_parts.h"

namespace es {
namespace {

using Clock = std::chrono::steady_clock;

class InferCallsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HostlessRepository what;
    what.ensemble = true;
    what.server_extra = "limits:\n  max_inflight_calls: 2\n";
    auto config = WriteHostlessRepository(dir_, what);
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    config_ = std::move(config).value();
    parts_ = std::make_unique<HostlessParts>(&config_);
    ASSERT_TRUE(parts_->started.ok()) << parts_->started.ToString();
  }

  // A request for `model` whose one input is `floats` FP32 values of [1, 4].
  static inference::ModelInferRequest Request(const std::string& model, size_t floats = 4) {
    inference::ModelInferRequest r;
    r.set_model_name(model);
    r.set_id("r1");
    auto* in = r.add_inputs();
    in->set_name("input");
    in->set_datatype("FP32");
    in->add_shape(1);
    in->add_shape(4);
    r.add_raw_input_contents(std::string(floats * 4, '\0'));
    return r;
  }

  // Runs `request` on a fresh place; the status `done` gave, nullopt when
  // done has not run by the time Run returned (all these answers are given
  // at once: no host is ever asked).
  std::optional<Status> RunOnce(const inference::ModelInferRequest& request) {
    StatusOr<InferCalls::Place> place = parts_->calls->Admit(request.model_name());
    EXPECT_TRUE(place.ok()) << place.status().ToString();
    if (!place.ok()) return std::nullopt;
    std::optional<Status> answer;
    int calls = 0;
    inference::ModelInferResponse response;
    parts_->calls->Run(*place, request, &response, InferCalls::CallContext{}, [&](const Status& s) {
      ++calls;
      answer = s;
    });
    EXPECT_LE(calls, 1) << "done ran more than once";
    return answer;
  }

  testing::TempDir dir_;
  ServerConfig config_;
  std::unique_ptr<HostlessParts> parts_;
};

TEST_F(InferCallsTest, AdmitsUpToMaxInflightCallsThenRefusesResourceExhausted) {
  StatusOr<InferCalls::Place> first = parts_->calls->Admit("mlp");
  StatusOr<InferCalls::Place> second = parts_->calls->Admit("mlp");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(parts_->calls->held(), 2);

  StatusOr<InferCalls::Place> third = parts_->calls->Admit("mlp");
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().code(), StatusCode::kResourceExhausted) << third.status().ToString();
  EXPECT_NE(third.status().message().find("limits.max_inflight_calls 2"), std::string::npos)
      << third.status().message();
  EXPECT_EQ(parts_->calls->held(), 2) << "a refused call must not keep a place";
}

TEST_F(InferCallsTest, ReleasingTheLastCopyOfAPlaceGivesItBack) {
  StatusOr<InferCalls::Place> first = parts_->calls->Admit("mlp");
  StatusOr<InferCalls::Place> second = parts_->calls->Admit("mlp");
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(second.ok());
  InferCalls::Place copy = *first;  // e.g. the transport's answer still holds it
  first = Status::Cancelled("dropped");
  EXPECT_EQ(parts_->calls->held(), 2) << "a copy still holds the place";
  EXPECT_EQ(parts_->calls->Admit("mlp").status().code(), StatusCode::kResourceExhausted);

  copy.reset();
  EXPECT_EQ(parts_->calls->held(), 1);
  StatusOr<InferCalls::Place> again = parts_->calls->Admit("mlp");
  EXPECT_TRUE(again.ok()) << again.status().ToString();
}

TEST_F(InferCallsTest, DrainingRefusesNewCallsUnavailable) {
  EXPECT_TRUE(parts_->calls->accepting());
  parts_->calls->SetAccepting(false);
  EXPECT_FALSE(parts_->calls->accepting());
  StatusOr<InferCalls::Place> place = parts_->calls->Admit("mlp");
  ASSERT_FALSE(place.ok());
  EXPECT_EQ(place.status().code(), StatusCode::kUnavailable) << place.status().ToString();
  EXPECT_NE(place.status().message().find("shutting down"), std::string::npos) << place.status().message();
  EXPECT_EQ(parts_->calls->held(), 0);
  EXPECT_TRUE(parts_->calls->WaitForInFlight(Clock::now())) << "a refused call is not in flight";

  parts_->calls->SetAccepting(true);
  EXPECT_TRUE(parts_->calls->Admit("mlp").ok());
}

TEST_F(InferCallsTest, AnAdmittedCallIsInFlightUntilItsRunEnds) {
  StatusOr<InferCalls::Place> place = parts_->calls->Admit("mlp");
  ASSERT_TRUE(place.ok());
  EXPECT_FALSE(parts_->calls->WaitForInFlight(Clock::now())) << "admitted, not run yet: the drain must wait for it";
  parts_->calls->Refuse(*place, "mlp", Status::InvalidArgument("not JSON"));
  EXPECT_TRUE(parts_->calls->WaitForInFlight(Clock::now() + std::chrono::seconds(5)));
  EXPECT_EQ(parts_->calls->held(), 1) << "the run ended, the place stays until the answer has left";
}

TEST_F(InferCallsTest, UnknownModelIsAnsweredNotFound) {
  std::optional<Status> answer = RunOnce(Request("nope"));
  ASSERT_TRUE(answer.has_value()) << "done must run at once";
  EXPECT_EQ(answer->code(), StatusCode::kNotFound) << answer->ToString();
  EXPECT_NE(answer->message().find("nope"), std::string::npos) << answer->message();
  EXPECT_TRUE(parts_->calls->WaitForInFlight(Clock::now() + std::chrono::seconds(5)));
  EXPECT_EQ(parts_->calls->held(), 0);
}

TEST_F(InferCallsTest, ADecodeErrorIsAnsweredInvalidArgumentWithoutReachingTheCore) {
  // The same model, well formed: it reaches the core, which has no runner
  // for ensembles and says so.
  std::optional<Status> good = RunOnce(Request("ens"));
  ASSERT_TRUE(good.has_value());
  EXPECT_EQ(good->code(), StatusCode::kUnimplemented) << good->ToString();

  // Three floats for a [1, 4] input: refused by the decoder, never run.
  std::optional<Status> bad = RunOnce(Request("ens", 3));
  ASSERT_TRUE(bad.has_value()) << "done must run at once";
  EXPECT_EQ(bad->code(), StatusCode::kInvalidArgument) << bad->ToString();
  EXPECT_EQ(bad->message().find("composite"), std::string::npos) << "reached the core: " << bad->message();
  EXPECT_TRUE(parts_->calls->WaitForInFlight(Clock::now() + std::chrono::seconds(5)));
}

TEST_F(InferCallsTest, ADecodeErrorCountsAsAFailureOfTheModel) {
  std::optional<Status> bad = RunOnce(Request("mlp", 3));
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->code(), StatusCode::kInvalidArgument) << bad->ToString();
  uint64_t failures = 0, successes = 0;
  ASSERT_TRUE(parts_->stats->Visit("mlp", "1", [&](const std::string&, int64_t, const ModelCounters& counters) {
    failures += counters.fail_count.load();
    successes += counters.success_count.load();
  }));
  EXPECT_EQ(failures, 1u) << "counted against the version it would have gone to";
  EXPECT_EQ(successes, 0u);
}

}  // namespace
}  // namespace es
