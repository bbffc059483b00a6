#include "server/repository/model_uploads.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "tests/common/temp_dir.h"

namespace es {
namespace {

namespace fs = std::filesystem;
using es::testing::TempDir;

std::string Slurp(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

size_t Entries(const fs::path& dir) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::recursive_directory_iterator(dir)) ++n;
  return n;
}

TEST(ModelUploadsTest, StagesEachUploadInAFreshPrivateFolder) {
  TempDir dir;
  const fs::path root = dir.path() / "uploads";
  ModelUploads uploads(root.string(), 1 << 20);
  StatusOr<std::string> first = uploads.Stage("m", "platform: torchscript\n", {{"1/model.pt", "weights"}});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(fs::path(*first).filename(), "m");
  EXPECT_EQ(fs::path(*first).parent_path().parent_path(), root);
  EXPECT_EQ(Slurp(fs::path(*first) / "config.yaml"), "platform: torchscript\n");
  EXPECT_EQ(Slurp(fs::path(*first) / "1" / "model.pt"), "weights");
  EXPECT_EQ(fs::status(fs::path(*first).parent_path()).permissions() & fs::perms::all, fs::perms::owner_all);

  StatusOr<std::string> second = uploads.Stage("m", "x: 1\n", {});
  ASSERT_TRUE(second.ok());
  EXPECT_NE(*second, *first);
  uploads.Remove(*first);
  EXPECT_FALSE(fs::exists(fs::path(*first).parent_path()));
  EXPECT_TRUE(fs::exists(*second));
  // A path Stage did not make is left alone.
  const fs::path other = dir.path() / "keep" / "m";
  fs::create_directories(other);
  uploads.Remove(other.string());
  EXPECT_TRUE(fs::exists(other));
}

TEST(ModelUploadsTest, BadUploadsLeaveNothing) {
  TempDir dir;
  const fs::path root = dir.path() / "uploads";
  ModelUploads uploads(root.string(), 10);
  for (const std::string& model : std::vector<std::string>{"", ".hidden", "a/b", "..", "x\ny"}) {
    EXPECT_EQ(uploads.Stage(model, "", {}).status().code(), StatusCode::kInvalidArgument) << model;
  }
  for (const std::string& path : std::vector<std::string>{"", "/abs", "../up", "1/../../up", "1//model.pt", "./model.pt", "1/.",
                                 "a\\b", "tab\there", std::string(256, 'a'), "config.yaml"}) {
    const Status s = uploads.Stage("m", "", {{path, "x"}}).status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << path << ": " << s.ToString();
  }
  // Over the byte bound in all, though each file is under it.
  const Status big = uploads.Stage("m", "", {{"1/model.pt", "123456"}, {"2/model.pt", "123456"}}).status();
  EXPECT_EQ(big.code(), StatusCode::kResourceExhausted) << big.ToString();
  // A file under another file's name: refused once the folder was made, and removed.
  const Status clash = uploads.Stage("m", "", {{"1", "x"}, {"1/model.pt", "y"}}).status();
  EXPECT_EQ(clash.code(), StatusCode::kInvalidArgument) << clash.ToString();
  EXPECT_NE(clash.message().find("clashes"), std::string::npos) << clash.message();
  EXPECT_EQ(Entries(root), 0u) << "a refused upload left files";
  EXPECT_EQ(Entries(dir.path()), 1u) << "something was written beside the upload folder";
}

TEST(ModelUploadsTest, TheTemporaryRootIsMadeOnFirstUseAndRemovedAtTheEnd) {
  TempDir dir;
  // The suite is single-threaded; TMPDIR is put back for the tests after.
  const char* had = std::getenv("TMPDIR");  // NOLINT(concurrency-mt-unsafe): see above
  const std::optional<std::string> before = had != nullptr ? std::optional<std::string>(had) : std::nullopt;
  ::setenv("TMPDIR", dir.path().c_str(), 1);  // NOLINT(concurrency-mt-unsafe): see above
  std::string root;
  {
    ModelUploads uploads("", 1 << 20);
    if (before) {
      ::setenv("TMPDIR", before->c_str(), 1);  // NOLINT(concurrency-mt-unsafe): see above
    } else {
      ::unsetenv("TMPDIR");  // NOLINT(concurrency-mt-unsafe): see above
    }
    EXPECT_EQ(uploads.root(), "");
    ASSERT_TRUE(uploads.Stage("m", "", {{"1/model.pt", "w"}}).ok());
    root = uploads.root();
    EXPECT_EQ(fs::path(root).parent_path(), dir.path());
    EXPECT_EQ(fs::path(root).filename().string().rfind("ensemble-uploads-", 0), 0u) << root;
  }
  EXPECT_FALSE(fs::exists(root));
}

TEST(ModelUploadsTest, AConfiguredRootKeepsWhatOthersPutThere) {
  TempDir dir;
  const fs::path root = dir.path() / "uploads";
  fs::create_directories(root / "someone-elses");
  {
    ModelUploads uploads(root.string(), 1 << 20);
    ASSERT_TRUE(uploads.Stage("m", "", {}).ok());
  }
  EXPECT_TRUE(fs::exists(root / "someone-elses"));
  EXPECT_EQ(Entries(root), 1u);
}

}  // namespace
}  // namespace es
