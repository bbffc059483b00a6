// Test helpers for config/: a throw-away folder tree and error matchers.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "config/status.h"

namespace es::testing {

// A fresh folder under $TMPDIR (or /tmp), removed with everything in it when
// the object goes away. Each test gets its own, so tests can run in parallel.
class TempTree {
 public:
  TempTree() {
    const char* tmp = getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/es-config-test-XXXXXX";
    char* made = mkdtemp(pattern.data());
    EXPECT_NE(made, nullptr) << "mkdtemp " << pattern;
    root_ = pattern;
  }
  ~TempTree() {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  TempTree(const TempTree&) = delete;
  TempTree& operator=(const TempTree&) = delete;

  std::string Path(const std::string& relative) const { return root_ + "/" + relative; }
  const std::string& root() const { return root_; }

  // Writes `content` to root/relative, creating the folders on the way.
  std::string Write(const std::string& relative, const std::string& content) const {
    const std::string path = Path(relative);
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << content;
    return path;
  }
  void MakeDir(const std::string& relative) const {
    std::filesystem::create_directories(Path(relative));
  }
  void Remove(const std::string& relative) const { std::filesystem::remove_all(Path(relative)); }

 private:
  std::string root_;
};

// 1-based line of the first occurrence of `needle` in `text` (0 if absent),
// so tests state which line they expect by its content, not by counting.
inline int LineOf(const std::string& text, const std::string& needle) {
  const size_t at = text.find(needle);
  if (at == std::string::npos) return 0;
  int line = 1;
  for (size_t i = 0; i < at; ++i) line += text[i] == '\n';
  return line;
}

// The error contract: INVALID_ARGUMENT, "<file>:<line>: <field>: ...".
inline void ExpectConfigError(const Status& status, const std::string& file, int line,
                              const std::string& field, const std::string& detail = "") {
  ASSERT_FALSE(status.ok()) << "expected an error at " << file << ":" << line;
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << status.ToString();
  const std::string prefix =
      file + ":" + std::to_string(line) + ": " + (field.empty() ? "" : field + ": ");
  EXPECT_EQ(status.message().rfind(prefix, 0), 0u)
      << "message: " << status.message() << "\nexpected prefix: " << prefix;
  if (!detail.empty()) {
    EXPECT_NE(status.message().find(detail), std::string::npos)
        << "message: " << status.message() << "\nexpected to contain: " << detail;
  }
}

}  // namespace es::testing
