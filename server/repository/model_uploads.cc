#include "server/repository/model_uploads.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>

#include <spdlog/spdlog.h>

#include "common/checked_math.h"
#include "common/errno_text.h"

namespace es {
namespace fs = std::filesystem;
namespace {

constexpr size_t kMaxComponent = 255;
constexpr size_t kMaxPath = 4096;

std::vector<std::string> Components(const std::string& path) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    const size_t slash = path.find('/', start);
    parts.push_back(path.substr(start, slash == std::string::npos ? std::string::npos : slash - start));
    if (slash == std::string::npos) return parts;
    start = slash + 1;
  }
}

Status WriteAll(int fd, const std::string& bytes, const std::string& path) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::Internal(path + ": cannot write: " + ErrnoText(errno));
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

// Creates `path` (relative to `dir`, checked by CheckPath) with its folders.
Status WriteFile(const fs::path& dir, const std::string& path, const std::string& bytes) {
  const std::vector<std::string> parts = Components(path);
  fs::path at = dir;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    at /= parts[i];
    if (::mkdir(at.c_str(), 0700) != 0 && errno != EEXIST) {
      return Status::Internal(at.string() + ": cannot make the folder: " + ErrnoText(errno));
    }
  }
  at /= parts.back();
  const int fd = ::open(at.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOTDIR || err == EEXIST || err == EISDIR) {
      return Status::InvalidArgument("file '" + path + "' clashes with another file of the upload");
    }
    return Status::Internal(at.string() + ": cannot create: " + ErrnoText(err));
  }
  Status written = WriteAll(fd, bytes, at.string());
  if (::close(fd) != 0 && written.ok()) written = Status::Internal(at.string() + ": " + ErrnoText(errno));
  return written;
}

}  // namespace

// TMPDIR is read here, while the router sets up (one thread), not on the
// repository's worker while other threads run.
ModelUploads::ModelUploads(std::string root, int64_t max_bytes) : root_(std::move(root)), max_bytes_(max_bytes) {
  const char* tmp = std::getenv("TMPDIR");  // NOLINT(concurrency-mt-unsafe): see above
  temp_base_ = tmp != nullptr && tmp[0] != '\0' ? tmp : "/tmp";
}

ModelUploads::~ModelUploads() {
  std::error_code ec;
  for (const std::string& folder : staged_) fs::remove_all(folder, ec);
  if (made_root_) fs::remove_all(root_, ec);
}

Status ModelUploads::CheckPath(const std::string& path) {
  const std::string quoted = "'" + path + "'";
  if (path.empty()) return Status::InvalidArgument("an uploaded file has an empty path (expected e.g. file:1/model.pt)");
  if (path.size() > kMaxPath) return Status::InvalidArgument("an uploaded file's path is longer than 4096 bytes");
  if (path[0] == '/') return Status::InvalidArgument("uploaded file " + quoted + ": the path must be relative");
  for (const char c : path) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f || c == '\\') {
      return Status::InvalidArgument("uploaded file " + quoted + ": the path holds a control character or '\\'");
    }
  }
  const std::vector<std::string> parts = Components(path);
  for (const std::string& part : parts) {
    if (part.empty() || part == "." || part == "..") {
      return Status::InvalidArgument("uploaded file " + quoted +
                                     ": every path component must be a plain name (no empty, '.' or '..')");
    }
    if (part.size() > kMaxComponent) {
      return Status::InvalidArgument("uploaded file " + quoted + ": a path component is longer than 255 bytes");
    }
  }
  if (parts.size() == 1 && parts[0] == "config.yaml") {
    return Status::InvalidArgument("uploaded file 'config.yaml': the model's config comes from the 'config' "
                                   "parameter, not from a file");
  }
  return Status::Ok();
}

Status ModelUploads::EnsureRoot() {
  if (!root_.empty()) {
    std::error_code ec;
    fs::create_directories(root_, ec);
    if (ec) return Status::Internal(root_ + ": cannot make the model upload folder: " + ec.message());
    return Status::Ok();
  }
  std::string pattern = temp_base_ + "/ensemble-uploads-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    return Status::Internal(pattern + ": cannot make the model upload folder: " + ErrnoText(errno));
  }
  root_ = pattern;
  made_root_ = true;
  spdlog::info("model uploads go to {} (removed at exit)", root_);
  return Status::Ok();
}

StatusOr<std::string> ModelUploads::Stage(const std::string& model, const std::string& config_yaml,
                                          const std::vector<File>& files) {
  // The model's name is the folder's: one plain, visible component.
  if (model.empty() || model[0] == '.' || model.find('/') != std::string::npos || !CheckPath(model).ok()) {
    return Status::InvalidArgument("'" + model + "' cannot be an uploaded model's name (it names its folder)");
  }
  uint64_t total = 0;
  for (const File& file : files) {
    ES_RETURN_IF_ERROR(CheckPath(file.path));
    const std::optional<uint64_t> sum = CheckedAdd(total, file.bytes.size());
    if (!sum || *sum > static_cast<uint64_t>(max_bytes_)) {
      return Status::ResourceExhausted("the uploaded files of model '" + model + "' hold more than " +
                                       std::to_string(max_bytes_) + " bytes (limits.max_request_bytes)");
    }
    total = *sum;
  }
  ES_RETURN_IF_ERROR(EnsureRoot());
  std::string upload = root_ + "/upload-XXXXXX";
  if (::mkdtemp(upload.data()) == nullptr) {
    return Status::Internal(upload + ": cannot make an upload folder: " + ErrnoText(errno));
  }
  staged_.insert(upload);
  const fs::path folder = fs::path(upload) / model;
  Status written = ::mkdir(folder.c_str(), 0700) == 0
                       ? Status::Ok()
                       : Status::Internal(folder.string() + ": cannot make the folder: " + ErrnoText(errno));
  if (written.ok()) written = WriteFile(folder, "config.yaml", config_yaml);
  for (size_t i = 0; written.ok() && i < files.size(); ++i) written = WriteFile(folder, files[i].path, files[i].bytes);
  if (!written.ok()) {
    Remove(folder.string());
    return written;
  }
  return folder.string();
}

void ModelUploads::Remove(const std::string& folder) {
  const std::string upload = fs::path(folder).parent_path().string();
  if (staged_.erase(upload) == 0) return;
  std::error_code ec;
  fs::remove_all(upload, ec);
  if (ec) spdlog::warn("{}: cannot remove an upload folder: {}", upload, ec.message());
}

}  // namespace es
