// Unit tests of clients/ that need no server: Status, the tensor helpers,
// ensemble-loadgen's sweep/shape syntax, percentiles, the stability rule, the
// checked answers kept per turn, the server-stage deltas, the report files,
// and the HTTP engine's slots when they cannot make their client.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "clients/loadgen/engine_common.h"
#include "clients/loadgen/http_engine.h"
#include "clients/loadgen/measure.h"
#include "clients/loadgen/options.h"
#include "clients/loadgen/report.h"
#include "clients/status.h"
#include "clients/tensor.h"

namespace es::client {
namespace {

TEST(ClientStatus, CarriesCodeAndMessage) {
  EXPECT_TRUE(Status().ok());
  EXPECT_EQ(Status().ToString(), "OK");
  Status s(grpc::StatusCode::NOT_FOUND, "model 'x' not found");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(s.ToString(), "NOT_FOUND: model 'x' not found");
  EXPECT_STREQ(CodeName(grpc::StatusCode::DEADLINE_EXCEEDED), "DEADLINE_EXCEEDED");
  Result<int> r = Status(grpc::StatusCode::INTERNAL, "boom");
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), grpc::StatusCode::INTERNAL);
  Result<int> v = 7;
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 7);
}

TEST(ClientTensor, DatatypesAndCounts) {
  EXPECT_EQ(DatatypeSize("FP32"), 4u);
  EXPECT_EQ(DatatypeSize("INT64"), 8u);
  EXPECT_EQ(DatatypeSize("BOOL"), 1u);
  EXPECT_EQ(DatatypeSize("BYTES"), 0u);
  const std::vector<int64_t> shape{2, 3, 4};
  EXPECT_EQ(ElementCount(shape), 24);
  EXPECT_EQ(ElementCount(std::vector<int64_t>{}), 1);
  EXPECT_EQ(ElementCount(std::vector<int64_t>{-1, 3}), -1);
  EXPECT_EQ(ElementCount(std::vector<int64_t>{int64_t{1} << 40, int64_t{1} << 30}), -1) << "overflow";
  EXPECT_STREQ(DatatypeOf<float>(), "FP32");
  EXPECT_STREQ(DatatypeOf<int64_t>(), "INT64");
}

TEST(ClientTensor, AddInputChecksTheByteCount) {
  inference::ModelInferRequest request;
  const std::vector<float> values(6, 1.5f);
  ASSERT_TRUE(AddInput<float>(&request, "x", {2, 3}, values).ok());
  ASSERT_EQ(request.inputs_size(), 1);
  EXPECT_EQ(request.inputs(0).datatype(), "FP32");
  EXPECT_EQ(request.raw_input_contents(0).size(), 24u);
  Status bad = AddInput<float>(&request, "y", {2, 4}, values);
  EXPECT_EQ(bad.code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(bad.message().find("'y'"), std::string::npos) << bad.message();
  EXPECT_EQ(request.inputs_size(), 1) << "a rejected input must leave the request unchanged";
  EXPECT_EQ(AddRawInput(&request, "z", "BYTES", {1}, "a", 1).code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST(ClientTensor, OutputViewsAndTheirErrors) {
  inference::ModelInferResponse response;
  auto* out = response.add_outputs();
  out->set_name("probabilities");
  out->set_datatype("FP32");
  out->add_shape(2);
  out->add_shape(3);
  const std::vector<float> values{1, 2, 3, 4, 5, 6};
  response.add_raw_output_contents()->assign(reinterpret_cast<const char*>(values.data()), 24);

  auto view = GetOutput<float>(response, "probabilities");
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_EQ(view->shape, (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(view->values.size(), 6u);
  EXPECT_EQ(view->row(1)[0], 4.0f);
  EXPECT_EQ(view->row(1).size(), 3u);
  auto copy = CopyOutput<float>(response, "probabilities");
  ASSERT_TRUE(copy.ok());
  EXPECT_EQ(copy->values, values);

  auto wrong_type = GetOutput<double>(response, "probabilities");
  EXPECT_EQ(wrong_type.status().code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(wrong_type.status().message().find("FP32"), std::string::npos);
  auto missing = GetOutput<float>(response, "logits");
  EXPECT_EQ(missing.status().code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(missing.status().message().find("probabilities"), std::string::npos) << "lists the outputs there are";

  response.mutable_raw_output_contents(0)->resize(20);  // payload disagrees with the shape
  EXPECT_EQ(GetOutput<float>(response, "probabilities").status().code(), grpc::StatusCode::INTERNAL);
}

}  // namespace
}  // namespace es::client

namespace es::loadgen {
namespace {

TEST(LoadgenOptions, SweepSyntax) {
  EXPECT_EQ(ParseSweep("8").value(), (std::vector<double>{8}));
  EXPECT_EQ(ParseSweep("1:64:x2").value(), (std::vector<double>{1, 2, 4, 8, 16, 32, 64}));
  EXPECT_EQ(ParseSweep("1:10:x3").value(), (std::vector<double>{1, 3, 9}));
  EXPECT_EQ(ParseSweep("8:32:+8").value(), (std::vector<double>{8, 16, 24, 32}));
  EXPECT_EQ(ParseSweep("1,2,7").value(), (std::vector<double>{1, 2, 7}));
  for (const char* bad : {"", "0", "-1", "4:1:x2", "1:8:x1", "1:8", "1:8:y2", "a", "1,,2", "0:4:x2"}) {
    const auto refused = ParseSweep(bad);
    EXPECT_EQ(refused.status().code(), es::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(refused.status().message().find(std::string("'") + bad + "'"), std::string::npos)
        << refused.status().message();
  }
  EXPECT_NE(ParseSweep("1:8:x1").status().message().find("factor must be > 1"), std::string::npos);
  auto shape = ParseShape("input:1,28,28");
  ASSERT_TRUE(shape.ok()) << shape.status().ToString();
  EXPECT_EQ(shape->first, "input");
  EXPECT_EQ(shape->second, (std::vector<int64_t>{1, 28, 28}));
  EXPECT_EQ(ParseShape("input").status().code(), es::StatusCode::kInvalidArgument);
  EXPECT_NE(ParseShape("input:1,x").status().message().find("dims are integers"), std::string::npos);
}

TEST(LoadgenStats, NearestRankPercentiles) {
  std::vector<int64_t> ns;
  for (int i = 1000; i >= 1; --i) ns.push_back(i * 1000);  // 1..1000 us, reversed
  const LatencySummary s = Summarize(ns);
  EXPECT_EQ(s.count, 1000u);
  EXPECT_DOUBLE_EQ(s.min_us, 1);
  EXPECT_DOUBLE_EQ(s.max_us, 1000);
  EXPECT_DOUBLE_EQ(s.p50_us, 500);
  EXPECT_DOUBLE_EQ(s.p90_us, 900);
  EXPECT_DOUBLE_EQ(s.p99_us, 990);
  EXPECT_DOUBLE_EQ(s.p999_us, 999);
  EXPECT_DOUBLE_EQ(s.mean_us, 500.5);
  std::vector<int64_t> empty;
  EXPECT_EQ(Summarize(empty).count, 0u);
}

TEST(LoadgenStats, StabilityRule) {
  EXPECT_TRUE(LastAgree({50, 100, 105, 109}, 3, 0.10));
  EXPECT_FALSE(LastAgree({100, 105, 111}, 3, 0.10));
  EXPECT_FALSE(LastAgree({100, 100}, 3, 0.10)) << "needs 3 windows";
  EXPECT_FALSE(LastAgree({0, 0, 0}, 3, 0.10)) << "nothing succeeded is not stable";
}

// A sample keeps the checked answers of its newest turn only (the measured
// turn's, not the warm-up's answers that came after it began); turns wrap
// at 2^16, and an empty sample takes any turn, 0x8000 and past included.
TEST(LoadgenStats, CheckedAnswersOfTheNewestTurnOnly) {
  using es::loadgen::CheckedAnswer;
  using es::loadgen::LabelCounts;
  using es::loadgen::Sample;
  using es::loadgen::TurnIsNewer;
  EXPECT_TRUE(TurnIsNewer(2, 1));
  EXPECT_FALSE(TurnIsNewer(1, 2));
  EXPECT_FALSE(TurnIsNewer(5, 5));
  EXPECT_TRUE(TurnIsNewer(0, 0xFFFF)) << "past the wrap";
  EXPECT_TRUE(TurnIsNewer(0x8001, 0x7FFF));
  const auto answer = [](uint32_t turn, bool right, bool readable = true, size_t request = 0) {
    return CheckedAnswer{readable, LabelCounts{1, 1, right ? 1U : 0U}, "", turn, request};
  };
  for (const uint32_t turn : {0U, 1U, 0x8000U, 0x9000U, 0xFFFFU}) {
    Sample s;
    s.AddChecked(answer(turn, true));
    s.AddChecked(answer(turn, false));
    s.AddChecked(answer(turn, true, /*readable=*/false));
    EXPECT_EQ(s.checked_turn, turn);
    EXPECT_EQ(s.checked.answers, 2U) << turn;
    EXPECT_EQ(s.checked.correct, 1U) << turn;
    EXPECT_EQ(s.unreadable, 1U) << turn;
    s.AddChecked(answer((turn - 1) & 0xFFFF, true));  // an older turn's answer
    EXPECT_EQ(s.checked.answers, 2U) << turn;
    s.AddChecked(answer((turn + 1) & 0xFFFF, false));  // a newer turn's: the older counts go
    EXPECT_EQ(s.checked.answers, 1U) << turn;
    EXPECT_EQ(s.checked.correct, 0U) << turn;
    EXPECT_EQ(s.unreadable, 0U) << turn;

    // Merging: an empty sample changes nothing, nor takes anything away.
    Sample empty;
    Sample merged = s;
    merged.Merge(std::move(empty));
    EXPECT_EQ(merged.checked_turn, s.checked_turn);
    EXPECT_EQ(merged.checked.answers, 1U) << turn;
    Sample into;
    into.Merge(Sample(s));
    EXPECT_EQ(into.checked_turn, s.checked_turn);
    EXPECT_EQ(into.checked.answers, 1U) << turn;
    // The same turn adds; an older one is dropped; a newer one replaces.
    Sample same, older, newer;
    same.AddChecked(answer((turn + 1) & 0xFFFF, true));
    older.AddChecked(answer(turn, true));
    newer.AddChecked(answer((turn + 2) & 0xFFFF, true));
    merged.Merge(std::move(same));
    EXPECT_EQ(merged.checked.answers, 2U) << turn;
    merged.Merge(std::move(older));
    EXPECT_EQ(merged.checked.answers, 2U) << turn;
    merged.Merge(std::move(newer));
    EXPECT_EQ(merged.checked.answers, 1U) << turn;
    EXPECT_EQ(merged.checked.correct, 1U) << turn;
    EXPECT_EQ(merged.checked_turn, (turn + 2) & 0xFFFF);
  }
}

// The checked answers by request: counted at the answer's request, merged
// request by request (the longer sample sets the length), and gone with
// the rest of an older turn's counts.
TEST(LoadgenStats, CheckedAnswersCountByRequest) {
  using es::loadgen::CheckedAnswer;
  using es::loadgen::LabelCounts;
  using es::loadgen::Sample;
  const auto answer = [](uint32_t turn, size_t request, bool right) {
    return CheckedAnswer{true, LabelCounts{1, 1, right ? 1U : 0U}, "", turn, request};
  };
  const auto answers = [](const Sample& s) {
    std::vector<uint64_t> out;
    for (const LabelCounts& c : s.checked_by_request) out.push_back(c.answers);
    return out;
  };
  Sample a;
  a.AddChecked(answer(1, 0, true));
  a.AddChecked(answer(1, 2, false));
  a.AddChecked(answer(1, 2, true));
  EXPECT_EQ(answers(a), (std::vector<uint64_t>{1, 0, 2}));
  EXPECT_EQ(a.checked_by_request[2].correct, 1U);
  Sample b;
  b.AddChecked(answer(1, 4, true));
  a.Merge(std::move(b));
  EXPECT_EQ(answers(a), (std::vector<uint64_t>{1, 0, 2, 0, 1}));
  Sample c;
  c.AddChecked(answer(1, 0, true));
  c.Merge(Sample(a));
  EXPECT_EQ(answers(c), (std::vector<uint64_t>{2, 0, 2, 0, 1})) << "a shorter sample merged with a longer one";
  c.AddChecked(answer(2, 1, true));  // a newer turn: the older turn's counts go
  EXPECT_EQ(answers(c), (std::vector<uint64_t>{0, 1}));
}

TEST(LoadgenStats, ServerStageDeltas) {
  ServerCounters a, b;
  a.success_count = 10;
  a.success_ns = 10'000'000;
  a.compute_infer_count = 5;
  a.compute_infer_ns = 1'000'000;
  b = a;
  b.success_count = 110;
  b.success_ns = 60'000'000;  // 50 ms over 100 requests: 500 us
  b.compute_infer_count = 55;
  b.compute_infer_ns = 11'000'000;  // 10 ms over 50 executions: 200 us
  b.execution_count = 50;
  b.inference_count = 200;
  const ServerStages s = StagesBetween(a, b);
  ASSERT_TRUE(s.available);
  EXPECT_EQ(s.success, 100u);
  EXPECT_DOUBLE_EQ(s.success_us, 500);
  EXPECT_DOUBLE_EQ(s.compute_infer_us, 200);
  EXPECT_DOUBLE_EQ(s.queue_us, -1) << "no count: not reported";
  EXPECT_DOUBLE_EQ(s.avg_batch, 4);
  EXPECT_FALSE(StagesBetween(std::nullopt, b).available);
}

Report SampleReport() {
  Report r;
  r.date = "2026-01-01T00:00:00Z";
  r.server = "127.0.0.1:8001";
  r.model = "m<&>";
  r.batch = 2;
  for (int c : {1, 2, 4}) {
    StepResult s;
    s.model = r.model;
    s.concurrency = c;
    s.windows = 3;
    s.stable = true;
    s.ok = 100 * c;
    s.throughput_rps = 100.0 * c;
    s.rows_per_s = 200.0 * c;
    s.latency = {s.ok, 900.0 * c, 500, 5000, 800.0 * c, 900.0 * c, 950.0 * c, 1000.0 * c, 1200.0 * c};
    r.steps.push_back(s);
  }
  return r;
}

TEST(LoadgenReport, CsvJsonAndSvg) {
  const Report r = SampleReport();
  const std::string csv = CsvText(r);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 4) << csv;
  EXPECT_EQ(csv.rfind("model,mode,concurrency", 0), 0u);

  const auto j = nlohmann::json::parse(JsonText(r));
  ASSERT_EQ(j["steps"].size(), 3u);
  EXPECT_EQ(j["steps"][2]["concurrency"], 4);
  EXPECT_DOUBLE_EQ(j["steps"][2]["latency_us"]["p99"].get<double>(), 4000);
  EXPECT_DOUBLE_EQ(j["peak_throughput_rps"].get<double>(), 400);
  EXPECT_TRUE(j["ceiling"].is_null());

  const std::string svg = SvgText(r);
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  size_t polylines = 0;
  for (size_t at = svg.find("<polyline"); at != std::string::npos; at = svg.find("<polyline", at + 1)) ++polylines;
  EXPECT_EQ(polylines, 2u) << "p50 and p99";
  EXPECT_NE(svg.find("m&lt;&amp;&gt;"), std::string::npos) << "the model name is escaped";
  EXPECT_EQ(svg.find("m<&>"), std::string::npos);
  EXPECT_NE(svg.find("throughput"), std::string::npos);
  EXPECT_NE(svg.find("latency (ms)"), std::string::npos);
}

TEST(LoadgenReport, SvgMarksUnstableStepsAndKeepsLabelsApart) {
  Report r = SampleReport();
  EXPECT_EQ(SvgText(r).find("not stable"), std::string::npos) << "every step stable: no mark, no legend entry";
  EXPECT_NE(SvgText(r).find(">c=2</text>"), std::string::npos);

  r.steps[1].stable = false;
  std::string svg = SvgText(r);
  EXPECT_NE(svg.find("concurrency 2: 200.0 req/s, p50 1.600 ms, not stable"), std::string::npos) << svg;
  EXPECT_NE(svg.find(">not stable</text>"), std::string::npos) << "the legend explains the hollow marks";
  EXPECT_EQ(svg.find("concurrency 4: 400.0 req/s, p50 3.200 ms, not stable"), std::string::npos);
  r.steps[1].soak = true;  // a soak has no stability check
  EXPECT_EQ(SvgText(r).find("not stable"), std::string::npos);

  // Two steps at nearly the same point: the second one's label would cover
  // the first's and is left out; its tooltip still names it.
  r = SampleReport();
  r.steps[1].throughput_rps = r.steps[0].throughput_rps + 1;
  r.steps[1].latency = r.steps[0].latency;
  svg = SvgText(r);
  EXPECT_NE(svg.find(">c=1</text>"), std::string::npos);
  EXPECT_EQ(svg.find(">c=2</text>"), std::string::npos) << svg;
  EXPECT_NE(svg.find(">c=4</text>"), std::string::npos);
  EXPECT_NE(svg.find("<title>concurrency 2: "), std::string::npos);
}

// A slot that cannot make its HTTP client sends nothing; a step counting
// its calls (--requests) would wait for them for ever. The engine gives up
// instead (lost_server, with the client's error), closed and open loop.
TEST(LoadgenHttpEngine, ASlotWithoutAClientEndsTheRunInsteadOfWaiting) {
  for (const bool open_loop : {false, true}) {
    SCOPED_TRACE(open_loop ? "open loop" : "closed loop");
    HttpLoadEngine engine("no-port-here", es::client::ClientOptions{}, EngineSettings{});
    LoadPlan plan;
    if (open_loop) {
      plan.rate = 1000;
    } else {
      plan.concurrency = 2;
    }
    const RequestSet requests{{std::string()}, {}, ""};  // outlives the run, as Start asks
    engine.Start(plan, requests);
    engine.RestartRequests(10);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!engine.lost_server() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_TRUE(engine.lost_server());
    EXPECT_NE(engine.lost_server_reason().find("cannot make an HTTP client: expected HOST:PORT, got 'no-port-here'"),
              std::string::npos)
        << engine.lost_server_reason();
    engine.Stop();
    EXPECT_EQ(engine.TakeSample().sent, 0u);
  }
}

}  // namespace
}  // namespace es::loadgen
