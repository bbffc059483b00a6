// CascadeCall (server/ensemble/cascade_call.h) with members played by the test: which
// rows reach which stage, each row's answer (the mean of the members it
// ran through), exit_stage, the report, and a member's error or malformed
// answer failing the request. SelectRows on plain and shared-memory inputs.
#include "server/ensemble/cascade_call.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>

namespace es {
namespace {

// Rows are FP32 [rows, 1] holding the row's id; each member answers two
// class probabilities per row from a table by row id.
using Table = std::map<float, std::pair<float, float>>;

ModelConfig Cascade(double threshold) {
  ModelConfig c;
  c.name = "casc";
  c.platform = "ensemble";
  c.max_batch_size = 8;
  c.inputs = {{"x", DataType::kFp32, {1}}};
  c.outputs = {{"p", DataType::kFp32, {2}}};
  c.ensemble.members = {{"small", 1.0, 0}, {"mid", 1.0, 0}, {"big", 1.0, 0}};
  c.ensemble.combine = CombineRule::kCascade;
  c.ensemble.stages = {{0}, {1, 2}};
  c.ensemble.exit_threshold = threshold;
  return c;
}

struct CascadeRun {
  std::vector<std::vector<float>> rows_seen;  // per call: the row ids a member got
  std::vector<size_t> members_called;
  int answers = 0;
  int released = 0;
  Status status;
  InferResponse response;
};

std::shared_ptr<InferRequest> Request(const ModelConfig& config, const std::vector<float>& ids,
                                      std::vector<float>* storage) {
  *storage = ids;
  auto r = std::make_shared<InferRequest>();
  r->model = &config;
  InferInput in;
  in.spec = &config.inputs[0];
  in.datatype = DataType::kFp32;
  in.shape = {static_cast<int64_t>(ids.size()), 1};
  in.data = reinterpret_cast<const uint8_t*>(storage->data());
  in.bytes = ids.size() * sizeof(float);
  r->inputs.push_back(in);
  return r;
}

// Members answer at once from `tables[m]`; `broken` members answer badly.
void Drive(const ModelConfig& config, const std::vector<float>& ids, const std::vector<Table>& tables, CascadeRun* run,
           std::map<size_t, Status> failing = {}, std::map<size_t, bool> malformed = {},
           std::vector<std::string> requested = {}) {
  std::vector<float> storage;
  auto request = Request(config, ids, &storage);
  request->requested_outputs = std::move(requested);
  auto call = std::make_shared<CascadeCall>(
      request,
      [run](const Status& s, InferResponse r) {
        ++run->answers;
        run->status = s;
        run->response = std::move(r);
      },
      [run] { ++run->released; },
      [&](size_t m, std::shared_ptr<const InferRequest> rows, CascadeCall::MemberDone done) {
        const InferInput& in = rows->inputs[0];
        std::vector<float> seen(in.bytes / sizeof(float));
        std::memcpy(seen.data(), in.data, in.bytes);
        run->rows_seen.push_back(seen);
        run->members_called.push_back(m);
        if (failing.count(m)) {
          done(0, failing[m], {});
          return;
        }
        InferOutput out{"p", DataType::kFp32, {static_cast<int64_t>(seen.size()), 2}, ""};
        for (float id : seen) {
          const auto [p0, p1] = tables[m].at(id);
          out.data.append(reinterpret_cast<const char*>(&p0), sizeof(float));
          out.data.append(reinterpret_cast<const char*>(&p1), sizeof(float));
        }
        if (malformed.count(m)) out.shape[0] += 1;  // claims a row it did not send
        InferResponse r;
        r.outputs.push_back(std::move(out));
        done(7, Status::Ok(), std::move(r));
      });
  call->Start();
}

std::vector<float> Floats(const InferOutput& o) {
  std::vector<float> v(o.data.size() / sizeof(float));
  std::memcpy(v.data(), o.data.data(), o.data.size());
  return v;
}

const std::vector<Table> kTables = {
    // small: sure of rows 0 and 2, unsure of 1 and 3
    {{0, {0.95f, 0.05f}}, {1, {0.5f, 0.5f}}, {2, {0.02f, 0.98f}}, {3, {0.6f, 0.4f}}},
    {{0, {0.9f, 0.1f}}, {1, {0.9f, 0.1f}}, {2, {0.1f, 0.9f}}, {3, {0.1f, 0.9f}}},  // mid
    {{0, {0.8f, 0.2f}}, {1, {0.7f, 0.3f}}, {2, {0.3f, 0.7f}}, {3, {0.2f, 0.8f}}},  // big
};

TEST(CascadeCallTest, RowsTheFirstStageIsSureOfLeaveAndTheRestGoOn) {
  ModelConfig config = Cascade(0.9);
  CascadeRun run;
  Drive(config, {0, 1, 2, 3}, kTables, &run, {}, {}, {"p", "exit_stage"});
  ASSERT_EQ(run.answers, 1);
  ASSERT_TRUE(run.status.ok()) << run.status.ToString();
  EXPECT_EQ(run.released, 1);
  // Stage 0 saw every row; both stage-1 members only rows 1 and 3.
  ASSERT_EQ(run.rows_seen.size(), 3u);
  EXPECT_EQ(run.rows_seen[0], (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(run.rows_seen[1], (std::vector<float>{1, 3}));
  EXPECT_EQ(run.rows_seen[2], (std::vector<float>{1, 3}));
  ASSERT_EQ(run.response.outputs.size(), 2u);
  const std::vector<float> p = Floats(run.response.outputs[0]);
  EXPECT_EQ(run.response.outputs[0].shape, (std::vector<int64_t>{4, 2}));
  // Rows 0 and 2: small alone. Rows 1 and 3: the mean of all three.
  EXPECT_FLOAT_EQ(p[0], 0.95f);
  EXPECT_FLOAT_EQ(p[4], 0.02f);
  EXPECT_FLOAT_EQ(p[2], (0.5f + 0.9f + 0.7f) / 3);
  EXPECT_FLOAT_EQ(p[6], (0.6f + 0.1f + 0.2f) / 3);
  const InferOutput& exits = run.response.outputs[1];
  EXPECT_EQ(exits.name, "exit_stage");
  EXPECT_EQ(exits.datatype, DataType::kInt32);
  std::vector<int32_t> e(4);
  std::memcpy(e.data(), exits.data.data(), exits.data.size());
  EXPECT_EQ(e, (std::vector<int32_t>{0, 1, 0, 1}));
  ASSERT_NE(run.response.cascade, nullptr);
  EXPECT_EQ(run.response.cascade->stages_used, 2);
  EXPECT_EQ(run.response.cascade->exits, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(run.response.cascade->member_rows_saved, 4);  // rows 0 and 2 skipped mid and big
  EXPECT_EQ(run.response.member_versions, "small:7,mid:7,big:7");
}

TEST(CascadeCallTest, WhenEveryRowIsSureTheLaterStagesNeverRun) {
  ModelConfig config = Cascade(0.9);
  CascadeRun run;
  Drive(config, {0, 2}, kTables, &run);
  ASSERT_TRUE(run.status.ok());
  EXPECT_EQ(run.members_called, (std::vector<size_t>{0}));
  EXPECT_EQ(run.response.cascade->stages_used, 1);
  EXPECT_EQ(run.response.outputs.size(), 1u);  // exit_stage only when asked for
}

TEST(CascadeCallTest, AThresholdOfOneRunsEveryStage) {
  ModelConfig config = Cascade(1.0);
  CascadeRun run;
  Drive(config, {0, 2}, kTables, &run);  // rows stage 0 alone is sure of at 0.9
  ASSERT_TRUE(run.status.ok());
  EXPECT_EQ(run.members_called.size(), 3u);
  EXPECT_EQ(run.response.cascade->exits, (std::vector<int64_t>{0, 2}));
}

TEST(CascadeCallTest, AFailedMemberFailsTheRequestNamingItsStage) {
  ModelConfig config = Cascade(0.9);
  CascadeRun run;
  Drive(config, {0, 1}, kTables, &run, {{2, Status::Unavailable("host cpu1 is down")}});
  ASSERT_EQ(run.answers, 1);
  EXPECT_EQ(run.status.code(), StatusCode::kUnavailable);
  EXPECT_EQ(run.status.message(), "ensemble 'casc' stage 1 member 'big': host cpu1 is down");
  EXPECT_EQ(run.released, 1);
}

TEST(CascadeCallTest, AMalformedMemberAnswerIsRejectedBeforeItIsRead) {
  ModelConfig config = Cascade(0.9);
  CascadeRun run;
  Drive(config, {0, 1}, kTables, &run, {}, {{0, true}});
  ASSERT_EQ(run.answers, 1);
  EXPECT_EQ(run.status.code(), StatusCode::kInternal);
  EXPECT_NE(run.status.message().find("stage 0 member 'small': answered an output that is not [2, classes]"),
            std::string::npos)
      << run.status.message();
  EXPECT_EQ(run.members_called.size(), 1u);  // no later stage on a bad answer
}

TEST(CascadeCallTest, SelectRowsGathersFromSharedMemoryInputsToo) {
  ModelConfig config = Cascade(0.9);
  std::vector<float> storage;
  auto request = Request(config, {10, 11, 12, 13}, &storage);
  // As a shared-memory input: no data pointer, read on demand.
  InferInput& in = request->inputs[0];
  in.read_into = [&storage](uint8_t* dest) {
    std::memcpy(dest, storage.data(), storage.size() * sizeof(float));
    return Status::Ok();
  };
  in.data = nullptr;
  auto rows = SelectRows(*request, {1, 3});
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  const InferInput& got = (*rows)->inputs[0];
  EXPECT_EQ(got.shape, (std::vector<int64_t>{2, 1}));
  std::vector<float> v(2);
  std::memcpy(v.data(), got.data, 2 * sizeof(float));
  EXPECT_EQ(v, (std::vector<float>{11, 13}));
  EXPECT_FALSE(got.read_into);
}

}  // namespace
}  // namespace es
