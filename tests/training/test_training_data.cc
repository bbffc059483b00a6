// Unit tests of ensemble-train's data side: the Fashion-MNIST reader (real
// files when installed, hand-made corrupt ones always), the synthetic data
// set, the sharded batch loader's order contract and threading, and the
// calibration scores.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/steady_clock.h"
#include "training/augmentation.h"
#include "training/batch_loader.h"
#include "training/calibration.h"
#include "training/fashion_mnist.h"
#include "training/synthetic_data.h"
#include "tests/common/temp_dir.h"

namespace es {
namespace {

using es::testing::TempDir;

// Ends the binary (exit 124) if a test that could deadlock overruns, so a hung
// loader fails fast instead of eating the ctest timeout.
class Watchdog {
 public:
  Watchdog(std::chrono::seconds budget, std::string what)
      : thread_([this, budget, what = std::move(what)] {
          std::unique_lock<std::mutex> lock(mu_);
          if (!cv_.wait_for(lock, budget, [this] { return done_; })) {
            std::fprintf(stderr, "\n*** watchdog: %s ran past its time budget\n", what.c_str());
            std::fflush(stderr);
            _exit(124);
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;  // GUARDED_BY(mu_)
  std::thread thread_;
};

::testing::AssertionResult StatusIs(const Status& status, StatusCode code, std::initializer_list<std::string> parts) {
  if (status.code() != code) {
    return ::testing::AssertionFailure() << "expected " << StatusCodeName(code) << ", got " << status.ToString();
  }
  for (const std::string& part : parts) {
    if (status.message().find(part) == std::string::npos) {
      return ::testing::AssertionFailure() << "'" << status.message() << "' does not contain '" << part << "'";
    }
  }
  return ::testing::AssertionSuccess();
}

// ---------------------------------------------------------------- Fashion-MNIST files

std::string Be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

// IDX image file whose pixel j of image i is (7i + j) % 256.
std::string ImagesIdx(uint32_t header_count, uint32_t actual_count, uint32_t side = 28, uint32_t magic = 0x803) {
  std::string idx = Be32(magic) + Be32(header_count) + Be32(side) + Be32(side);
  for (uint32_t i = 0; i < actual_count; ++i) {
    for (uint32_t j = 0; j < side * side; ++j) idx.push_back(static_cast<char>((7 * i + j) % 256));
  }
  return idx;
}

std::string LabelsIdx(uint32_t header_count, const std::vector<uint8_t>& labels, uint32_t magic = 0x801) {
  std::string idx = Be32(magic) + Be32(header_count);
  for (uint8_t label : labels) idx.push_back(static_cast<char>(label));
  return idx;
}

void WriteGz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

class FashionMnistFilesTest : public ::testing::Test {
 protected:
  std::string images_path(DataSplit split = DataSplit::kTrain) const {
    return dir_.Path(FashionMnistImagesFile(split));
  }
  std::string labels_path(DataSplit split = DataSplit::kTrain) const {
    return dir_.Path(FashionMnistLabelsFile(split));
  }
  void WriteSplit(const std::string& images, const std::string& labels, DataSplit split = DataSplit::kTrain) {
    WriteGz(images_path(split), images);
    WriteGz(labels_path(split), labels);
  }
  StatusOr<Dataset> Load(DataSplit split = DataSplit::kTrain) const { return LoadFashionMnist(dir_.root(), split); }

  TempDir dir_{"es_fmnist_"};
};

TEST_F(FashionMnistFilesTest, LoadsASmallValidSplitExactly) {
  for (DataSplit split : {DataSplit::kTrain, DataSplit::kTest}) {
    WriteSplit(ImagesIdx(3, 3), LabelsIdx(3, {3, 0, 9}), split);
    StatusOr<Dataset> data = Load(split);
    ASSERT_TRUE(data.ok()) << data.status().ToString();
    ASSERT_EQ(data->size(), 3);
    EXPECT_EQ(data->images.sizes(), at::IntArrayRef({3, 1, 28, 28}));
    EXPECT_EQ(data->images.scalar_type(), at::kFloat);
    EXPECT_TRUE(data->images.is_contiguous());
    EXPECT_EQ(data->labels.scalar_type(), at::kLong);
    EXPECT_TRUE(at::equal(data->labels, at::tensor({3, 0, 9}, at::kLong)));
    const at::Tensor expected =
        (at::arange(784, at::kLong).unsqueeze(0) + 7 * at::arange(3, at::kLong).unsqueeze(1)).remainder(256);
    EXPECT_TRUE(at::equal(data->images.view({3, 784}), expected.to(at::kFloat).div(255.0)));
  }
}

TEST_F(FashionMnistFilesTest, MissingDirIsNotFoundNamingTheFile) {
  const std::string dir = dir_.Path("absent");
  StatusOr<Dataset> data = LoadFashionMnist(dir, DataSplit::kTrain);
  ASSERT_FALSE(data.ok());
  EXPECT_EQ(data.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(data.status().message(),
            "fashion-mnist: cannot open " + dir + "/train-images-idx3-ubyte.gz: No such file or directory");
}

TEST_F(FashionMnistFilesTest, MissingLabelsFileIsNotFoundNamingIt) {
  WriteGz(images_path(DataSplit::kTest), ImagesIdx(3, 3));
  EXPECT_TRUE(StatusIs(Load(DataSplit::kTest).status(), StatusCode::kNotFound,
                       {"cannot open " + labels_path(DataSplit::kTest), "No such file"}));
}

TEST_F(FashionMnistFilesTest, NotGzipIsDataLoss) {
  dir_.Write(FashionMnistImagesFile(DataSplit::kTrain), ImagesIdx(3, 3));  // plain IDX, not compressed
  WriteGz(labels_path(), LabelsIdx(3, {1, 2, 3}));
  EXPECT_TRUE(StatusIs(Load().status(), StatusCode::kDataLoss, {images_path(), "not a gzip file"}));
  dir_.Write(FashionMnistImagesFile(DataSplit::kTrain), "");
  EXPECT_TRUE(StatusIs(Load().status(), StatusCode::kDataLoss, {images_path(), "not a gzip file"}));
}

TEST_F(FashionMnistFilesTest, TruncatedGzipIsDataLoss) {
  WriteSplit(ImagesIdx(3, 3), LabelsIdx(3, {1, 2, 3}));
  std::filesystem::resize_file(images_path(), std::filesystem::file_size(images_path()) / 2);
  EXPECT_TRUE(StatusIs(Load().status(), StatusCode::kDataLoss, {images_path(), "truncated gzip data"}));
}

TEST_F(FashionMnistFilesTest, CorruptGzipIsDataLoss) {
  WriteSplit(ImagesIdx(3, 3), LabelsIdx(3, {1, 2, 3}));
  std::string gz;
  {
    std::FILE* f = std::fopen(labels_path().c_str(), "rb");
    ASSERT_NE(f, nullptr);
    char buf[4096];
    gz.append(buf, std::fread(buf, 1, sizeof buf, f));
    std::fclose(f);
  }
  gz[gz.size() - 6] = static_cast<char>(gz[gz.size() - 6] ^ 0x5a);  // inside the CRC-32 of the trailer
  dir_.Write(FashionMnistLabelsFile(DataSplit::kTrain), gz);
  EXPECT_TRUE(StatusIs(Load().status(), StatusCode::kDataLoss, {labels_path(), "corrupt gzip data"}));
}

TEST_F(FashionMnistFilesTest, BadMagicIsDataLoss) {
  WriteSplit(ImagesIdx(3, 3, 28, 0x801), LabelsIdx(3, {1, 2, 3}));
  EXPECT_TRUE(
      StatusIs(Load().status(), StatusCode::kDataLoss, {images_path(), "bad magic 0x00000801, expected 0x00000803"}));
  WriteSplit(ImagesIdx(3, 3), LabelsIdx(3, {1, 2, 3}, 0x803));
  EXPECT_TRUE(
      StatusIs(Load().status(), StatusCode::kDataLoss, {labels_path(), "bad magic 0x00000803, expected 0x00000801"}));
}

TEST_F(FashionMnistFilesTest, WrongImageSizeIsInvalidArgument) {
  WriteSplit(ImagesIdx(3, 3, 32), LabelsIdx(3, {1, 2, 3}));
  EXPECT_TRUE(
      StatusIs(Load().status(), StatusCode::kInvalidArgument, {images_path(), "images are 32x32, expected 28x28"}));
}

TEST_F(FashionMnistFilesTest, ShortOrLongIdxBodyIsDataLoss) {
  WriteSplit(ImagesIdx(3, 2), LabelsIdx(3, {1, 2, 3}));
  EXPECT_TRUE(
      StatusIs(Load().status(), StatusCode::kDataLoss, {images_path(), "truncated: header says 3 images, file has 2"}));
  WriteSplit(ImagesIdx(3, 3), LabelsIdx(3, {1, 2}));
  EXPECT_TRUE(
      StatusIs(Load().status(), StatusCode::kDataLoss, {labels_path(), "truncated: header says 3 labels, file has 2"}));
  WriteSplit(ImagesIdx(3, 3), LabelsIdx(3, {1, 2, 3, 4}));
  EXPECT_TRUE(StatusIs(Load().status(), StatusCode::kDataLoss, {labels_path(), "header says 3 labels, but 1 bytes"}));
  WriteSplit(ImagesIdx(3, 3), Be32(0x801) + std::string(2, '\0'));  // 6 of the 8 header bytes
  EXPECT_TRUE(StatusIs(Load().status(), StatusCode::kDataLoss, {labels_path(), "shorter than the 8-byte IDX header"}));
}

TEST_F(FashionMnistFilesTest, LabelOutOfRangeIsDataLoss) {
  WriteSplit(ImagesIdx(3, 3), LabelsIdx(3, {1, 12, 3}));
  EXPECT_TRUE(
      StatusIs(Load().status(), StatusCode::kDataLoss, {labels_path(), "label 12 at index 1 is out of range [0, 10)"}));
}

TEST_F(FashionMnistFilesTest, ImageLabelCountMismatchNamesBothFiles) {
  WriteSplit(ImagesIdx(3, 3), LabelsIdx(2, {1, 2}));
  EXPECT_TRUE(StatusIs(Load().status(), StatusCode::kInvalidArgument,
                       {images_path() + " has 3 images but " + labels_path() + " has 2 labels"}));
}

TEST(FashionMnistDebianTest, LoadsBothSplits) {
  if (!std::filesystem::exists(kDebianFashionMnistDir)) GTEST_SKIP() << kDebianFashionMnistDir << " is absent";
  for (auto [split, rows] : {std::pair{DataSplit::kTrain, 60000}, std::pair{DataSplit::kTest, 10000}}) {
    const SteadyClock::time_point start = SteadyClock::now();
    StatusOr<Dataset> data = LoadFashionMnist(kDebianFashionMnistDir, split);
    const double seconds = SecondsSince(start);
    ASSERT_TRUE(data.ok()) << data.status().ToString();
    EXPECT_LT(seconds, 10.0) << "one tensor op per file should take well under a second";
    ASSERT_EQ(data->size(), rows);
    EXPECT_EQ(data->images.sizes(), at::IntArrayRef({rows, 1, 28, 28}));
    EXPECT_EQ(data->images.scalar_type(), at::kFloat);
    EXPECT_EQ(data->labels.scalar_type(), at::kLong);
    EXPECT_EQ(data->images.min().item<float>(), 0.0f);
    EXPECT_EQ(data->images.max().item<float>(), 1.0f);
    const double mean = data->images.mean().item<double>();
    EXPECT_GT(mean, 0.25);  // Fashion-MNIST's pixel mean is 0.286
    EXPECT_LT(mean, 0.32);
    const at::Tensor counts = at::bincount(data->labels, {}, kNumClasses);
    ASSERT_EQ(counts.size(0), kNumClasses);
    for (int64_t k = 0; k < kNumClasses; ++k) {
      const double share = counts[k].item<double>() / static_cast<double>(rows);
      EXPECT_NEAR(share, 0.1, 0.01) << "class " << k;
    }
  }
}

// ---------------------------------------------------------------- synthetic data

TEST(SyntheticDataTest, ShapesRangeAndBalancedLabels) {
  const Dataset data = MakeSyntheticDataset(1003, 7);
  ASSERT_EQ(data.size(), 1003);
  EXPECT_EQ(data.images.sizes(), at::IntArrayRef({1003, 1, 28, 28}));
  EXPECT_EQ(data.images.scalar_type(), at::kFloat);
  EXPECT_TRUE(data.images.is_contiguous());
  EXPECT_EQ(data.labels.scalar_type(), at::kLong);
  EXPECT_GE(data.images.min().item<float>(), 0.0f);
  EXPECT_LE(data.images.max().item<float>(), 1.0f);
  const at::Tensor counts = at::bincount(data.labels, {}, kNumClasses);
  ASSERT_EQ(counts.size(0), kNumClasses);
  EXPECT_GE(counts.min().item<int64_t>(), 100);
  EXPECT_LE(counts.max().item<int64_t>(), 101);
  EXPECT_EQ(MakeSyntheticDataset(0, 7).size(), 0);
}

TEST(SyntheticDataTest, DeterministicGivenRowsAndSeed) {
  const Dataset a = MakeSyntheticDataset(500, 42);
  const Dataset b = MakeSyntheticDataset(500, 42);
  EXPECT_TRUE(at::equal(a.images, b.images));
  EXPECT_TRUE(at::equal(a.labels, b.labels));
  const Dataset c = MakeSyntheticDataset(500, 43);
  EXPECT_FALSE(at::equal(a.images, c.images));
  EXPECT_FALSE(at::equal(a.labels, c.labels));
}

// Class means of one seed classify another seed's rows: the prototypes are
// shared, and the classes are learnable.
TEST(SyntheticDataTest, SeedsShareLearnablePrototypes) {
  const Dataset train = MakeSyntheticDataset(2000, 1);
  const Dataset test = MakeSyntheticDataset(1000, 2);
  const at::Tensor flat = train.images.view({train.size(), -1});
  const at::Tensor means = at::zeros({kNumClasses, flat.size(1)}).index_add_(0, train.labels, flat);
  means.div_(at::bincount(train.labels, {}, kNumClasses).unsqueeze(1).to(at::kFloat));
  const at::Tensor predicted = at::cdist(test.images.view({test.size(), -1}), means).argmin(1);
  const double accuracy = predicted.eq(test.labels).to(at::kDouble).mean().item<double>();
  EXPECT_GT(accuracy, 0.9);
}

// ---------------------------------------------------------------- batch loader

// Row i's pixels all equal i, so a batch says which rows it holds.
Dataset IndexedDataset(int64_t rows) {
  const at::Tensor ids = at::arange(rows, at::kFloat);
  return Dataset{ids.view({rows, 1, 1, 1}).expand({rows, 1, 28, 28}).contiguous(),
                 at::arange(rows, at::kLong).remainder(kNumClasses)};
}

at::Tensor RowIds(const Batch& batch) {
  return batch.images.view({batch.images.size(0), -1}).select(1, 0).to(at::kLong);
}

// A loader the test needs (its spec is valid): aborts with the error if not.
std::unique_ptr<BatchLoader> Loader(const Dataset& data, const ShardSpec& shard, int threads, int prefetch) {
  return BatchLoader::Create(data, shard, threads, prefetch).value();
}

// The next batch; an error fails the test and reads as the end of the epoch.
std::optional<Batch> NextBatch(BatchLoader& loader) {
  StatusOr<std::optional<Batch>> batch = loader.Next();
  EXPECT_TRUE(batch.ok()) << batch.status().ToString();
  if (!batch.ok()) return std::nullopt;
  return std::move(batch).value();
}

// Every batch of one epoch, checking they come in order.
std::vector<Batch> Epoch(BatchLoader& loader, int64_t epoch, int64_t first_batch = 0) {
  loader.StartEpoch(epoch, first_batch);
  std::vector<Batch> batches;
  while (std::optional<Batch> batch = NextBatch(loader)) {
    EXPECT_EQ(batch->index, first_batch + static_cast<int64_t>(batches.size()));
    batches.push_back(std::move(*batch));
  }
  EXPECT_FALSE(NextBatch(loader).has_value()) << "the end of an epoch stays the end";
  return batches;
}

ShardSpec Spec(int rank, int world, int64_t global_batch, uint64_t seed = 1) {
  ShardSpec spec;
  spec.rank = rank;
  spec.world_size = world;
  spec.global_batch = global_batch;
  spec.seed = seed;
  return spec;
}

TEST(BatchLoaderTest, BatchesPerEpochDropsThePartialBatch) {
  EXPECT_EQ(Loader(IndexedDataset(103), Spec(0, 1, 10), 1, 1)->batches_per_epoch(), 10);
  EXPECT_EQ(Loader(IndexedDataset(100), Spec(0, 1, 10), 1, 1)->batches_per_epoch(), 10);
  std::unique_ptr<BatchLoader> sharded = Loader(IndexedDataset(99), Spec(1, 2, 10), 2, 2);
  EXPECT_EQ(sharded->batches_per_epoch(), 9);
  EXPECT_EQ(sharded->rows_per_batch(), 5);
}

TEST(BatchLoaderTest, RejectsBadShardSpecs) {
  const Dataset data = IndexedDataset(20);
  EXPECT_TRUE(ValidateShardSpec(data, Spec(0, 2, 8)).ok());
  EXPECT_TRUE(StatusIs(ValidateShardSpec(data, Spec(0, 3, 8)), StatusCode::kInvalidArgument,
                       {"global_batch 8 is not divisible by world_size 3"}));
  EXPECT_TRUE(
      StatusIs(ValidateShardSpec(data, Spec(2, 2, 8)), StatusCode::kInvalidArgument, {"rank 2 is outside [0, 2)"}));
  EXPECT_TRUE(StatusIs(ValidateShardSpec(data, Spec(0, 0, 8)), StatusCode::kInvalidArgument, {"world_size 0"}));
  EXPECT_TRUE(StatusIs(ValidateShardSpec(data, Spec(0, 1, 0)), StatusCode::kInvalidArgument, {"global_batch 0"}));
  EXPECT_TRUE(StatusIs(ValidateShardSpec(data, Spec(0, 1, 32)), StatusCode::kInvalidArgument,
                       {"20 rows, fewer than one global batch of 32"}));
  EXPECT_FALSE(ValidateShardSpec(Dataset{}, Spec(0, 1, 8)).ok());
  StatusOr<std::unique_ptr<BatchLoader>> refused = BatchLoader::Create(data, Spec(0, 3, 8), 1, 1);
  EXPECT_TRUE(StatusIs(refused.status(), StatusCode::kInvalidArgument,
                       {"batch loader: global_batch 8 is not divisible by world_size 3"}));
}

TEST(BatchLoaderTest, NextIsNulloptBeforeStartEpoch) {
  std::unique_ptr<BatchLoader> loader = Loader(IndexedDataset(32), Spec(0, 1, 8), 2, 2);
  EXPECT_FALSE(NextBatch(*loader).has_value());
  loader->StartEpoch(0, 4);  // past the end: an empty epoch
  EXPECT_FALSE(NextBatch(*loader).has_value());
}

TEST(BatchLoaderTest, RanksTogetherCoverEachEpochOnceInPermutationOrder) {
  const int64_t rows = 103, global = 12;
  const int world = 3;
  const Dataset data = IndexedDataset(rows);
  for (int64_t epoch : {0, 1, 2}) {
    std::vector<std::vector<Batch>> per_rank;
    for (int r = 0; r < world; ++r) {
      std::unique_ptr<BatchLoader> loader = Loader(data, Spec(r, world, global, 9), 2, 3);
      per_rank.push_back(Epoch(*loader, epoch));
      ASSERT_EQ(per_rank.back().size(), 8u);
    }
    const at::Tensor permutation = EpochPermutation(rows, 9, epoch);
    std::set<int64_t> seen;
    for (int64_t b = 0; b < 8; ++b) {
      std::vector<at::Tensor> ids;
      for (int r = 0; r < world; ++r) {
        const Batch& batch = per_rank[r][b];
        EXPECT_EQ(batch.images.size(0), 4);
        EXPECT_TRUE(at::equal(batch.labels, RowIds(batch).remainder(kNumClasses))) << "labels follow their rows";
        ids.push_back(RowIds(batch));
      }
      const at::Tensor all = at::cat(ids);
      EXPECT_TRUE(at::equal(all, permutation.slice(0, b * global, (b + 1) * global))) << "epoch " << epoch;
      for (int64_t i = 0; i < all.size(0); ++i) seen.insert(all[i].item<int64_t>());
    }
    EXPECT_EQ(seen.size(), 96u) << "every row of the first 8*12 permutation positions exactly once";
  }
}

TEST(BatchLoaderTest, OneRankEqualsTwoRanksConcatenated) {
  const Dataset data = IndexedDataset(100);
  for (int64_t epoch : {0, 1, 5}) {
    std::unique_ptr<BatchLoader> one = Loader(data, Spec(0, 1, 8, 3), 1, 2);
    std::unique_ptr<BatchLoader> rank0 = Loader(data, Spec(0, 2, 8, 3), 2, 1);
    std::unique_ptr<BatchLoader> rank1 = Loader(data, Spec(1, 2, 8, 3), 3, 4);
    const std::vector<Batch> whole = Epoch(*one, epoch);
    const std::vector<Batch> first = Epoch(*rank0, epoch);
    const std::vector<Batch> second = Epoch(*rank1, epoch);
    ASSERT_EQ(whole.size(), 12u);
    ASSERT_EQ(first.size(), whole.size());
    ASSERT_EQ(second.size(), whole.size());
    for (size_t b = 0; b < whole.size(); ++b) {
      EXPECT_TRUE(at::equal(at::cat({first[b].images, second[b].images}), whole[b].images)) << "batch " << b;
      EXPECT_TRUE(at::equal(at::cat({first[b].labels, second[b].labels}), whole[b].labels)) << "batch " << b;
    }
  }
}

at::Tensor EpochOrder(const std::vector<Batch>& batches) {
  std::vector<at::Tensor> ids;
  for (const Batch& batch : batches) ids.push_back(RowIds(batch));
  return at::cat(ids);
}

TEST(BatchLoaderTest, EpochsReshuffleAndSeedsDecide) {
  const Dataset data = IndexedDataset(64);
  std::unique_ptr<BatchLoader> a = Loader(data, Spec(0, 1, 8, 5), 2, 2);
  std::unique_ptr<BatchLoader> b = Loader(data, Spec(0, 1, 8, 5), 1, 1);
  std::unique_ptr<BatchLoader> c = Loader(data, Spec(0, 1, 8, 6), 2, 2);
  const at::Tensor a0 = EpochOrder(Epoch(*a, 0));
  const at::Tensor a1 = EpochOrder(Epoch(*a, 1));
  EXPECT_FALSE(at::equal(a0, a1)) << "each epoch has its own permutation";
  EXPECT_TRUE(at::equal(std::get<0>(a0.sort()), at::arange(64, at::kLong)));
  EXPECT_TRUE(at::equal(a1, EpochOrder(Epoch(*b, 1)))) << "same seed, same order, whatever the threads";
  EXPECT_TRUE(at::equal(a0, EpochOrder(Epoch(*b, 0))));
  EXPECT_FALSE(at::equal(a0, EpochOrder(Epoch(*c, 0)))) << "another seed, another order";
}

TEST(BatchLoaderTest, StartEpochMidEpochResumesAndDiscardsPrefetched) {
  const Dataset data = IndexedDataset(80);
  std::unique_ptr<BatchLoader> reference = Loader(data, Spec(0, 1, 8), 1, 1);
  const std::vector<Batch> full = Epoch(*reference, 2);
  ASSERT_EQ(full.size(), 10u);

  std::unique_ptr<BatchLoader> loader = Loader(data, Spec(0, 1, 8), 2, 5);
  loader->StartEpoch(0);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(NextBatch(*loader).has_value());  // epoch 0's batches 3.. are queued now
  const std::vector<Batch> resumed = Epoch(*loader, 2, 4);
  ASSERT_EQ(resumed.size(), 6u);
  for (size_t i = 0; i < resumed.size(); ++i) {
    EXPECT_EQ(resumed[i].index, full[4 + i].index);
    EXPECT_TRUE(at::equal(resumed[i].images, full[4 + i].images)) << "batch " << 4 + i;
    EXPECT_TRUE(at::equal(resumed[i].labels, full[4 + i].labels)) << "batch " << 4 + i;
  }
}

// A batch whose gather fails (here: images the augmentation refuses) is an
// error of that batch, naming it; the loader goes on with the next.
TEST(BatchLoaderTest, AFailedGatherIsAnErrorNamingTheBatch) {
  Watchdog watchdog(std::chrono::seconds(60), "AFailedGatherIsAnErrorNamingTheBatch");
  const Dataset data{at::zeros({32, 28, 28}), at::arange(32, at::kLong).remainder(kNumClasses)};  // no channel
  ShardSpec spec = Spec(0, 1, 8);
  spec.augment = {2, true};
  std::unique_ptr<BatchLoader> loader = Loader(data, spec, 2, 2);
  loader->StartEpoch(3);
  for (int64_t index : {0, 1}) {
    StatusOr<std::optional<Batch>> batch = loader->Next();
    ASSERT_FALSE(batch.ok());
    EXPECT_TRUE(StatusIs(batch.status(), StatusCode::kInternal,
                         {"batch " + std::to_string(index) + " of epoch 3", "AugmentRows needs"}));
  }
}

// Restarting while the workers are still gathering the old epoch's next
// batches (big batches keep them busy): batch k+1 of epoch e must never be
// served as batch k+1 of epoch e+1.
TEST(BatchLoaderTest, RapidRestartsNeverServeAStaleBatch) {
  Watchdog watchdog(std::chrono::seconds(60), "RapidRestartsNeverServeAStaleBatch");
  const int64_t rows = 8192, global = 1024;
  const Dataset data = IndexedDataset(rows);
  std::unique_ptr<BatchLoader> loader = Loader(data, Spec(0, 1, global, 4), 4, 4);
  for (int64_t epoch = 0; epoch < 60; ++epoch) {
    const int64_t first = epoch % 3;
    loader->StartEpoch(epoch, first);
    std::optional<Batch> batch = NextBatch(*loader);
    ASSERT_TRUE(batch.has_value());
    EXPECT_EQ(batch->index, first);
    EXPECT_TRUE(
        at::equal(RowIds(*batch), EpochPermutation(rows, 4, epoch).slice(0, first * global, (first + 1) * global)))
        << "epoch " << epoch;
  }
}

TEST(BatchLoaderTest, DestructorStopsMidEpoch) {
  Watchdog watchdog(std::chrono::seconds(60), "DestructorStopsMidEpoch");
  const Dataset data = MakeSyntheticDataset(4096, 1);
  for (int threads : {1, 3}) {
    { std::unique_ptr<BatchLoader> never_started = Loader(data, Spec(0, 1, 16), threads, 4); }
    {
      std::unique_ptr<BatchLoader> just_started = Loader(data, Spec(0, 1, 16), threads, 4);
      just_started->StartEpoch(0);
    }
    {
      std::unique_ptr<BatchLoader> mid_epoch = Loader(data, Spec(1, 2, 16), threads, 8);
      mid_epoch->StartEpoch(3);
      for (int i = 0; i < 5; ++i) ASSERT_TRUE(NextBatch(*mid_epoch).has_value());
    }
  }
}

// Threads x prefetch, including one thread with one batch ahead.
class BatchLoaderOrderTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(BatchLoaderOrderTest, BatchesComeInOrderWithTheRightRows) {
  Watchdog watchdog(std::chrono::seconds(60), "BatchesComeInOrderWithTheRightRows");
  const auto [threads, prefetch] = GetParam();
  const Dataset data = IndexedDataset(500);
  std::unique_ptr<BatchLoader> loader = Loader(data, Spec(1, 2, 20, 11), threads, prefetch);
  for (int64_t epoch : {0, 1}) {
    const std::vector<Batch> batches = Epoch(*loader, epoch);
    ASSERT_EQ(batches.size(), 25u);
    const at::Tensor permutation = EpochPermutation(500, 11, epoch);
    for (size_t b = 0; b < batches.size(); ++b) {
      const int64_t begin = static_cast<int64_t>(b) * 20 + 10;
      EXPECT_TRUE(at::equal(RowIds(batches[b]), permutation.slice(0, begin, begin + 10))) << "batch " << b;
      EXPECT_TRUE(batches[b].images.is_contiguous());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(ThreadsAndPrefetch, BatchLoaderOrderTest,
                         ::testing::Combine(::testing::Values(1, 2, 4), ::testing::Values(1, 3)),
                         [](const ::testing::TestParamInfo<std::tuple<int, int>>& test) {
                           return "threads" + std::to_string(std::get<0>(test.param)) + "_prefetch" +
                                  std::to_string(std::get<1>(test.param));
                         });

// ---------------------------------------------------------------- calibration

TEST(CalibrationTest, PerfectOneHotPredictions) {
  const at::Tensor labels = at::tensor({2, 0, 1, 2}, at::kLong);
  const ClassifierScores s = ScoreClassifier(at::one_hot(labels, 3).to(at::kFloat), labels);
  EXPECT_EQ(s.rows, 4);
  EXPECT_DOUBLE_EQ(s.accuracy, 1.0);
  EXPECT_NEAR(s.nll, 0.0, 1e-12);
  EXPECT_DOUBLE_EQ(s.brier, 0.0);
  EXPECT_DOUBLE_EQ(s.ece, 0.0);
}

TEST(CalibrationTest, UniformPredictions) {
  const int64_t classes = 4;
  const at::Tensor uniform = at::full({4, classes}, 0.25, at::kDouble);
  // Argmax ties go to class 0: one of these four rows is right, and the
  // confidence (0.25) equals the accuracy, so ECE is 0.
  const ClassifierScores s = ScoreClassifier(uniform, at::tensor({0, 1, 2, 3}, at::kLong));
  EXPECT_DOUBLE_EQ(s.accuracy, 0.25);
  EXPECT_NEAR(s.nll, std::log(4.0), 1e-12);
  EXPECT_NEAR(s.brier, (classes - 1.0) / classes, 1e-12);
  EXPECT_NEAR(s.ece, 0.0, 1e-12);
  const ClassifierScores wrong = ScoreClassifier(uniform, at::tensor({1, 1, 3, 2}, at::kLong));
  EXPECT_DOUBLE_EQ(wrong.accuracy, 0.0);
  EXPECT_NEAR(wrong.ece, 0.25, 1e-12);
}

// Two bins, [0, 0.5) and [0.5, 1]:
//   bin 1: confidences 0.9 (right), 0.8 (wrong), 0.6 (right): acc 2/3, conf 2.3/3 -> |gap| 0.1, weight 3/5
//   bin 0: confidences 0.4 (wrong), 0.45 (right):            acc 1/2, conf 0.425 -> |gap| 0.075, weight 2/5
//   ECE = 0.06 + 0.03 = 0.09
// Brier per row: 0.015, 1.46, 0.24, 0.74, 0.465 -> mean 0.584.
TEST(CalibrationTest, HandWorkedTwoBinExample) {
  const at::Tensor p = at::tensor({0.9, 0.05, 0.05,  //
                                   0.8, 0.1, 0.1,    //
                                   0.2, 0.6, 0.2,    //
                                   0.3, 0.3, 0.4,    //
                                   0.35, 0.45, 0.2},
                                  at::kDouble)
                           .view({5, 3});
  const at::Tensor labels = at::tensor({0, 1, 1, 0, 1}, at::kLong);
  const ClassifierScores s = ScoreClassifier(p, labels, 2);
  EXPECT_EQ(s.rows, 5);
  EXPECT_NEAR(s.accuracy, 0.6, 1e-12);
  EXPECT_NEAR(s.nll, -(std::log(0.9) + std::log(0.1) + std::log(0.6) + std::log(0.3) + std::log(0.45)) / 5, 1e-12);
  EXPECT_NEAR(s.brier, 0.584, 1e-12);
  EXPECT_NEAR(s.ece, 0.09, 1e-12);
  // Float32 input is scored the same, to float precision.
  EXPECT_NEAR(ScoreClassifier(p.to(at::kFloat), labels, 2).ece, 0.09, 1e-6);
}

TEST(CalibrationTest, ClampsZeroProbabilityAndChecksInputs) {
  const at::Tensor p = at::tensor({1.0, 0.0}, at::kDouble).view({1, 2});
  const ClassifierScores s = ScoreClassifier(p, at::tensor({1}, at::kLong));
  EXPECT_NEAR(s.nll, -std::log(1e-12), 1e-9);
  EXPECT_DOUBLE_EQ(s.brier, 2.0);
  EXPECT_DOUBLE_EQ(s.ece, 1.0) << "confidence 1.0 lands in the last bin";
  EXPECT_EQ(ScoreClassifier(at::zeros({0, 3}), at::zeros({0}, at::kLong)).rows, 0);
  EXPECT_THROW(ScoreClassifier(p, at::tensor({2}, at::kLong)), c10::Error);
  EXPECT_THROW(ScoreClassifier(p, at::tensor({0, 1}, at::kLong)), c10::Error);
  EXPECT_THROW(ScoreClassifier(p.view({2}), at::tensor({0}, at::kLong)), c10::Error);
  EXPECT_THROW(ScoreClassifier(p, at::tensor({0}, at::kLong), 0), c10::Error);
}

// ---- augmentation (augmentation.h) ----------------------------------------

TEST(AugmentationTest, DrawsStayInRangeAreRepeatableAndVary) {
  const Augmentation a{2, true};
  std::set<int> dxs, dys;
  int flips = 0;
  for (int64_t p = 0; p < 2000; ++p) {
    const RowTransform t = DrawTransform(a, 7, 3, p);
    ASSERT_GE(t.dx, -2);
    ASSERT_LE(t.dx, 2);
    ASSERT_GE(t.dy, -2);
    ASSERT_LE(t.dy, 2);
    dxs.insert(t.dx);
    dys.insert(t.dy);
    flips += t.flip;
    const RowTransform again = DrawTransform(a, 7, 3, p);
    ASSERT_TRUE(again.dx == t.dx && again.dy == t.dy && again.flip == t.flip);
  }
  EXPECT_EQ(dxs.size(), 5u);
  EXPECT_EQ(dys.size(), 5u);
  EXPECT_GT(flips, 800);
  EXPECT_LT(flips, 1200);
  int differ = 0;
  for (int64_t p = 0; p < 50; ++p) {
    const RowTransform x = DrawTransform(a, 7, 3, p), y = DrawTransform(a, 7, 4, p);
    differ += x.dx != y.dx || x.dy != y.dy || x.flip != y.flip;
  }
  EXPECT_GT(differ, 25) << "another epoch draws other transforms";
  const RowTransform none = DrawTransform(Augmentation{}, 7, 3, 5);
  EXPECT_TRUE(none.dx == 0 && none.dy == 0 && !none.flip);
}

TEST(AugmentationTest, AugmentRowsMovesEachPixelAsItsTransformSays) {
  const Augmentation a{3, true};
  const int64_t rows = 64;
  at::Tensor images = at::zeros({rows, 1, 28, 28}, at::kFloat);
  for (int64_t r = 0; r < rows; ++r) images[r][0][10][5] = 1.0f;  // one lit pixel at (y 10, x 5)
  AugmentRows(images, a, 11, 2, 100);
  for (int64_t r = 0; r < rows; ++r) {
    const RowTransform t = DrawTransform(a, 11, 2, 100 + r);
    // Source (10, 5) lands at y = 10 + dy, x = 5 + dx, mirrored when flipped.
    const int64_t y = 10 + t.dy, x = t.flip ? 27 - (5 + t.dx) : 5 + t.dx;
    EXPECT_EQ(images[r][0][y][x].item<float>(), 1.0f) << "row " << r;
    EXPECT_EQ(images[r].sum().item<float>(), 1.0f) << "row " << r << ": one pixel, nothing else";
  }
  at::Tensor wrong = at::zeros({2, 28, 28}, at::kFloat);
  EXPECT_THROW(AugmentRows(wrong, a, 1, 0, 0), c10::Error);
}

TEST(AugmentationTest, OneRankEqualsTwoRanksAndTheDatasetIsUntouched) {
  const Dataset data = MakeSyntheticDataset(48, 5);
  const at::Tensor before = data.images.clone();
  ShardSpec one = Spec(0, 1, 16, 3);
  one.augment = {2, true};
  std::unique_ptr<BatchLoader> single = Loader(data, one, 2, 2);
  const std::vector<Batch> whole = Epoch(*single, 1);
  std::vector<std::vector<Batch>> halves;
  for (int r = 0; r < 2; ++r) {
    ShardSpec spec = Spec(r, 2, 16, 3);
    spec.augment = {2, true};
    std::unique_ptr<BatchLoader> loader = Loader(data, spec, 1, 2);
    halves.push_back(Epoch(*loader, 1));
  }
  ASSERT_EQ(whole.size(), 3u);
  for (size_t b = 0; b < whole.size(); ++b) {
    EXPECT_TRUE(at::equal(whole[b].images, at::cat({halves[0][b].images, halves[1][b].images})));
  }
  // Augmented: the batch differs from the plain gather of the same rows.
  std::unique_ptr<BatchLoader> plain = Loader(data, Spec(0, 1, 16, 3), 1, 2);
  EXPECT_FALSE(at::equal(Epoch(*plain, 1)[0].images, whole[0].images));
  EXPECT_TRUE(at::equal(data.images, before)) << "the loader wrote into the dataset";
}

}  // namespace
}  // namespace es
