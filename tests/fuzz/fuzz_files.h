// FuzzDir: the per-process scratch folder of the file-based fuzz targets (the
// YAML loaders read files, not buffers). Made once under $TMPDIR (else /tmp)
// and reused for every input, because a folder per input would measure the
// file system rather than the parser; removed at normal exit. scripts/fuzz.sh
// points TMPDIR at its scratch folder, so a crashed run leaves nothing behind.
#pragma once

#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>

namespace es::fuzz {

class FuzzDir {
 public:
  explicit FuzzDir(const std::string& prefix) {
    const char* env = getenv("TMPDIR");
    std::string pattern = std::string(env != nullptr && *env != '\0' ? env : "/tmp") + "/" + prefix + "XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      std::perror(("mkdtemp " + pattern).c_str());
      std::abort();
    }
    root_ = pattern;
  }
  ~FuzzDir() {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  FuzzDir(const FuzzDir&) = delete;
  FuzzDir& operator=(const FuzzDir&) = delete;

  const std::string& root() const { return root_; }
  std::string Path(const std::string& relative) const { return root_ + "/" + relative; }

  // Writes root/relative (replacing it), creating its folders; aborts on
  // failure, which would make every later input meaningless.
  std::string Write(const std::string& relative, std::string_view content) const {
    const std::filesystem::path path = Path(relative);
    std::error_code ec;
    std::filesystem::create_directories(path.parent_path(), ec);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    if (!out.flush()) {
      std::fprintf(stderr, "cannot write %s\n", path.c_str());
      std::abort();
    }
    return path.string();
  }

 private:
  std::string root_;
};

}  // namespace es::fuzz
