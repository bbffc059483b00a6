// TempDir: a fresh folder (mkdtemp under $TMPDIR, else /tmp) removed with
// everything in it when the object goes away, so tests never share state and
// can run in parallel. The one temp-folder helper of every test suite.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

namespace es::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "es_test_") {
    const char* env = getenv("TMPDIR");
    std::string pattern = std::string(env != nullptr && *env != '\0' ? env : "/tmp") + "/" + prefix + "XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) ADD_FAILURE() << "mkdtemp(" << pattern << "): " << std::strerror(errno);
    root_ = pattern;
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const std::string& root() const { return root_; }
  std::string Path(const std::string& relative) const { return root_ + "/" + relative; }

  // Writes `content` to root/relative, creating the folders on the way.
  std::string Write(const std::string& relative, const std::string& content) const {
    const std::string path = Path(relative);
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << content;
    return path;
  }
  void MakeDir(const std::string& relative) const { std::filesystem::create_directories(Path(relative)); }
  void Remove(const std::string& relative) const { std::filesystem::remove_all(Path(relative)); }

 private:
  std::string root_;
  std::filesystem::path path_;
};

}  // namespace es::testing
