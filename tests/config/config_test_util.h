// Test helpers for config/: a throw-away folder tree and error matchers.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/status.h"
#include "tests/common/temp_dir.h"

namespace es::testing {

// The config tests' name for the shared temp-folder helper.
using TempTree = TempDir;

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
