// ResponseCache (server/core/response_cache.h): what the key depends on
// (model identity, version, every input's datatype, shape and bytes; not
// the input names), the byte bound with the least recently used out first,
// an answer larger than the cache not kept, EraseModel dropping a model's
// entries and refusing answers computed before it, and the figures.
#include "server/core/response_cache.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace es {
namespace {

class ResponseCacheTest : public ::testing::Test {
 protected:
  ResponseCacheTest() {
    model_.name = "mlp";
    model_.platform = "torchscript";
    model_.max_batch_size = 8;
    model_.inputs = {{"input", DataType::kFp32, {4}}};
    model_.outputs = {{"p", DataType::kFp32, {2}}};
  }

  // A request of one row of `values`.
  InferRequest Request(const std::vector<float>& values) {
    data_.push_back(values);
    InferRequest r;
    r.model = &model_;
    InferInput in;
    in.spec = &model_.inputs[0];
    in.datatype = DataType::kFp32;
    in.shape = {1, static_cast<int64_t>(values.size())};
    in.data = reinterpret_cast<const uint8_t*>(data_.back().data());
    in.bytes = values.size() * sizeof(float);
    r.inputs.push_back(in);
    return r;
  }

  // A lookup of an "mlp" entry (the generation it gives is not used).
  static std::optional<std::vector<InferOutput>> Lookup(ResponseCache& cache, const std::string& key) {
    uint64_t generation = 0;
    return cache.Lookup(key, "mlp", &generation);
  }
  // The generation a miss of `model` gives.
  static uint64_t Generation(ResponseCache& cache, const std::string& model) {
    uint64_t generation = 0;
    EXPECT_FALSE(cache.Lookup("no such key", model, &generation).has_value());
    return generation;
  }

  static std::vector<InferOutput> Answer(size_t bytes) {
    return {InferOutput{"p", DataType::kFp32, {1, 2}, std::string(bytes, 'x')}};
  }

  ModelConfig model_;
  std::vector<std::vector<float>> data_;
};

TEST_F(ResponseCacheTest, TheKeyFollowsTheModelTheVersionAndEveryInputByte) {
  const std::string key = ResponseCache::KeyOf(model_, 1, Request({1, 2, 3, 4}));
  EXPECT_EQ(key.size(), 32u) << "a SHA-256 digest";
  EXPECT_EQ(ResponseCache::KeyOf(model_, 1, Request({1, 2, 3, 4})), key) << "the same request, the same key";
  EXPECT_NE(ResponseCache::KeyOf(model_, 2, Request({1, 2, 3, 4})), key) << "another version";
  EXPECT_NE(ResponseCache::KeyOf(model_, 1, Request({1, 2, 3, 5})), key) << "one input byte";
  InferRequest reshaped = Request({1, 2, 3, 4});
  reshaped.inputs[0].shape = {2, 2};
  EXPECT_NE(ResponseCache::KeyOf(model_, 1, reshaped), key) << "the shape";
  InferRequest retyped = Request({1, 2, 3, 4});
  retyped.inputs[0].datatype = DataType::kInt32;
  EXPECT_NE(ResponseCache::KeyOf(model_, 1, retyped), key) << "the datatype";
  ModelConfig changed = model_;
  changed.host_key = "mlp@2";  // a config change that alters what its versions compute
  EXPECT_NE(ResponseCache::KeyOf(changed, 1, Request({1, 2, 3, 4})), key);
  // Not the names: an ensemble's member call carries the ensemble's.
  TensorSpec renamed{"image", DataType::kFp32, {4}};
  InferRequest member_call = Request({1, 2, 3, 4});
  member_call.inputs[0].spec = &renamed;
  member_call.requested_outputs = {"probabilities"};
  EXPECT_EQ(ResponseCache::KeyOf(model_, 1, member_call), key);
  // An input still in a client's shared memory (read when submitted): no
  // key, as the region could change before the host reads it ...
  InferRequest shm = Request({1, 2, 3, 4});
  std::vector<uint8_t> region(reinterpret_cast<const uint8_t*>(shm.inputs[0].data),
                              reinterpret_cast<const uint8_t*>(shm.inputs[0].data) + shm.inputs[0].bytes);
  shm.inputs[0].data = nullptr;
  shm.inputs[0].read_into = [&region](uint8_t* dest) {
    std::copy(region.begin(), region.end(), dest);
    return Status::Ok();
  };
  EXPECT_EQ(ResponseCache::KeyOf(model_, 1, shm), "");
  // ... and once the request owns a copy, the key of the same bytes sent
  // inline, whatever the region holds afterwards.
  ASSERT_TRUE(ResponseCache::OwnInputs(&shm).ok());
  region.assign(region.size(), 0xff);
  ASSERT_NE(shm.inputs[0].data, nullptr);
  EXPECT_EQ(shm.inputs[0].read_into, nullptr);
  EXPECT_EQ(ResponseCache::KeyOf(model_, 1, shm), key);
  // A region that cannot be read (unregistered since): the error, the input untouched.
  InferRequest gone = Request({1, 2, 3, 4});
  gone.inputs[0].data = nullptr;
  gone.inputs[0].read_into = [](uint8_t*) { return Status::NotFound("region 'r' is not registered"); };
  EXPECT_EQ(ResponseCache::OwnInputs(&gone).code(), StatusCode::kNotFound);
  EXPECT_EQ(gone.inputs[0].data, nullptr);
}

TEST_F(ResponseCacheTest, TheLeastRecentlyUsedGoFirstWithinTheBound) {
  ResponseCache cache(3000);
  const std::string a = ResponseCache::KeyOf(model_, 1, Request({1}));
  const std::string b = ResponseCache::KeyOf(model_, 1, Request({2}));
  const std::string c = ResponseCache::KeyOf(model_, 1, Request({3}));
  EXPECT_FALSE(Lookup(cache, a).has_value());
  cache.Insert(a, "mlp", 0, Answer(1000));
  cache.Insert(b, "mlp", 0, Answer(1000));
  ASSERT_TRUE(Lookup(cache, a).has_value()) << "a used: b is now the least recent";
  cache.Insert(c, "mlp", 0, Answer(1000));
  EXPECT_TRUE(Lookup(cache, a).has_value());
  EXPECT_FALSE(Lookup(cache, b).has_value()) << "evicted to make room";
  const std::optional<std::vector<InferOutput>> kept = Lookup(cache, c);
  ASSERT_TRUE(kept.has_value());
  EXPECT_EQ((*kept)[0].data, std::string(1000, 'x'));
  EXPECT_EQ((*kept)[0].shape, (std::vector<int64_t>{1, 2}));

  const ResponseCache::Figures f = cache.figures();
  EXPECT_EQ(f.hits, 3u);
  EXPECT_EQ(f.misses, 2u);
  EXPECT_EQ(f.insertions, 3u);
  EXPECT_EQ(f.evictions, 1u);
  EXPECT_EQ(f.entries, 2u);
  EXPECT_LE(f.bytes, 3000u);
  EXPECT_GT(f.bytes, 2000u);

  cache.Insert(ResponseCache::KeyOf(model_, 1, Request({4})), "mlp", 0, Answer(5000));
  EXPECT_EQ(cache.figures().insertions, 3u) << "an answer larger than the whole cache is not kept";
  EXPECT_TRUE(Lookup(cache, a).has_value()) << "and evicts nothing";
}

TEST_F(ResponseCacheTest, EraseModelDropsItsEntriesAndRefusesAnswersComputedBefore) {
  ResponseCache cache(100000);
  const std::string a = ResponseCache::KeyOf(model_, 1, Request({1}));
  const std::string other = ResponseCache::KeyOf(model_, 1, Request({2}));
  cache.Insert(a, "mlp", Generation(cache, "mlp"), Answer(10));
  cache.Insert(other, "cnn", Generation(cache, "cnn"), Answer(10));
  const uint64_t before = Generation(cache, "mlp");
  cache.EraseModel("mlp");
  EXPECT_FALSE(Lookup(cache, a).has_value());
  EXPECT_TRUE(Lookup(cache, other).has_value()) << "another model's entries stay";
  cache.Insert(a, "mlp", before, Answer(10));
  EXPECT_FALSE(Lookup(cache, a).has_value()) << "a miss that began before the erase is not kept";
  cache.Insert(a, "mlp", Generation(cache, "mlp"), Answer(10));
  EXPECT_TRUE(Lookup(cache, a).has_value());
  EXPECT_EQ(cache.figures().entries, 2u);
}

}  // namespace
}  // namespace es
