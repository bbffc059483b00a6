// ModelUploads: where the models clients upload through the load API are
// written (Triton's RepositoryModelLoad with a `config` parameter and
// `file:<path>` parameters, e.g. `file:1/model.pt`).
//
// Each upload gets a folder of its own, `<root>/upload-XXXXXX/<model>/`,
// made fresh (mkdtemp, mode 0700), holding config.yaml (the translated
// config) and the files at their paths. A fresh folder per upload is what
// lets a new upload of a served model load beside the old one while the old
// keeps serving, and makes a failed upload leave nothing behind.
//
// Untrusted input: every path is relative, of plain components (no "", ".",
// "..", no control characters, none longer than 255 bytes), and
// config.yaml is not a file of the upload; files are created with O_EXCL
// and O_NOFOLLOW inside a folder nobody else can write, so nothing lands
// outside it. Together the files hold at most `max_bytes`.
//
// `root` "" is a private temporary folder ($TMPDIR or /tmp,
// "ensemble-uploads-XXXXXX") made at the first upload. At destruction the
// folders of uploads still present are removed, and the temporary root
// with them: uploads live as long as the server (as Triton's do).
//
// Thread safety: none; the repository's worker alone calls it.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"

namespace es {

class ModelUploads {
 public:
  struct File {
    std::string path;   // relative, as after "file:"
    std::string bytes;
  };

  ModelUploads(std::string root, int64_t max_bytes);
  ~ModelUploads();
  ModelUploads(const ModelUploads&) = delete;
  ModelUploads& operator=(const ModelUploads&) = delete;

  // Writes a new folder for `model` with config.yaml and `files`; its path.
  // On an error nothing of it is left.
  StatusOr<std::string> Stage(const std::string& model, const std::string& config_yaml,
                              const std::vector<File>& files);
  // Removes the folder (and its upload-XXXXXX parent) of a Stage; other
  // paths are left alone.
  void Remove(const std::string& folder);
  // The root ("" until the first upload made the temporary one).
  const std::string& root() const { return root_; }

  // Whether `path` may name a file of an upload (see above); the error
  // names what is wrong with it.
  static Status CheckPath(const std::string& path);

 private:
  Status EnsureRoot();

  std::string root_;
  std::string temp_base_;  // $TMPDIR or /tmp, read at construction
  bool made_root_ = false;
  int64_t max_bytes_;
  std::set<std::string> staged_;  // upload-XXXXXX folders present
};

}  // namespace es
