#include "training/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <torch/serialize.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iterator>
#include <system_error>

#include "common/errno_text.h"

namespace es {
namespace {

constexpr const char* kMeta[] = {"meta/step",        "meta/epoch",        "meta/batch_in_epoch",
                                 "meta/total_steps", "meta/global_batch", "meta/seed"};
// Added later: optional when read, so older checkpoints still resume.
constexpr const char* kTimeMeta[] = {"meta/train_seconds", "meta/step_seconds_sum", "meta/allreduce_seconds_sum",
                                     "meta/steps_timed"};

// Flushes `path` (a file or a folder) to the disk: the rename that follows
// must not publish a file whose bytes are still only in the page cache.
Status SyncFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::Internal("cannot open " + path + " to fsync it: " + es::ErrnoText(errno));
  const int rc = ::fsync(fd);
  const int fsync_errno = errno;
  ::close(fd);
  if (rc != 0) return Status::Internal("fsync " + path + ": " + es::ErrnoText(fsync_errno));
  return Status::Ok();
}

// Serialises `data` into `file` (LibTorch's archive; it throws c10::Error,
// caught here so that the caller sees a Status naming the file).
Status SaveArchive(const std::string& file, const CheckpointData& data) {
  try {
    torch::serialize::OutputArchive archive;
    const int64_t meta[] = {data.step,        data.epoch,        data.batch_in_epoch,
                            data.total_steps, data.global_batch, data.seed};
    for (size_t i = 0; i < std::size(kMeta); ++i) {
      archive.write(kMeta[i], at::scalar_tensor(meta[i], at::kLong));
    }
    const double times[] = {data.train_seconds, data.step_seconds_sum, data.allreduce_seconds_sum,
                            static_cast<double>(data.steps_timed)};
    for (size_t i = 0; i < std::size(kTimeMeta); ++i) {
      archive.write(kTimeMeta[i], at::scalar_tensor(times[i], at::kDouble));
    }
    for (const auto& [name, tensor] : data.tensors) archive.write(name, tensor);
    archive.save_to(file);
  } catch (const c10::Error& e) {
    return Status::Internal("cannot save " + file + ": " + e.what_without_backtrace());
  } catch (const std::exception& e) {  // out of memory: on the writer's thread it must not terminate
    return Status::Internal("cannot save " + file + ": " + e.what());
  }
  return Status::Ok();
}

// The steps of WriteCheckpointFile, each failing with what it was doing.
Status SaveSyncAndRename(const std::string& path, const CheckpointData& data) {
  const std::string tmp = path + ".tmp";
  ES_RETURN_IF_ERROR(SaveArchive(tmp, data));
  ES_RETURN_IF_ERROR(SyncFile(tmp));
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);  // atomic on one file system
  if (ec) return Status::Internal("cannot rename " + tmp + " onto " + path + ": " + ec.message());
  // The folder too: the rename is a change of the folder's entries.
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  return SyncFile(folder.empty() ? "." : folder.string());
}

}  // namespace

Status WriteCheckpointFile(const std::string& path, const CheckpointData& data) {
  const Status status = SaveSyncAndRename(path, data);
  if (status.ok()) return status;
  return Status(status.code(), "writing checkpoint " + path + ": " + status.message());
}

StatusOr<CheckpointData> ReadCheckpoint(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return Status::NotFound("no checkpoint at " + path + " to resume from");
  }
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    CheckpointData data;
    int64_t* meta[] = {&data.step,        &data.epoch,        &data.batch_in_epoch,
                       &data.total_steps, &data.global_batch, &data.seed};
    for (size_t i = 0; i < std::size(kMeta); ++i) {
      at::Tensor value;
      archive.read(kMeta[i], value);
      *meta[i] = value.item<int64_t>();
    }
    double* times[] = {&data.train_seconds, &data.step_seconds_sum, &data.allreduce_seconds_sum, nullptr};
    for (size_t i = 0; i < std::size(kTimeMeta); ++i) {
      at::Tensor value;
      if (!archive.try_read(kTimeMeta[i], value)) continue;
      if (times[i] != nullptr) {
        *times[i] = value.item<double>();
      } else {
        data.steps_timed = static_cast<int64_t>(value.item<double>());
      }
    }
    for (const std::string& key : archive.keys()) {
      if (key.rfind("meta/", 0) == 0) continue;
      at::Tensor value;
      archive.read(key, value);
      data.tensors.emplace_back(key, value);
    }
    return data;
  } catch (const c10::Error& e) {
    return Status(StatusCode::kDataLoss,
                  "checkpoint " + path + " is unreadable: " + e.what_without_backtrace());
  }
}

CheckpointWriter::CheckpointWriter(std::string path)
    : path_(std::move(path)), thread_([this] { Run(); }) {}

CheckpointWriter::~CheckpointWriter() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  thread_.join();
}

bool CheckpointWriter::Submit(CheckpointData data, bool wait) {
  MutexLock lock(&mu_);
  if (busy_ && !wait) {
    ++skipped_;
    return false;
  }
  while (busy_) cv_.Wait(&mu_);
  pending_ = std::move(data);
  busy_ = true;
  cv_.NotifyAll();
  return true;
}

Status CheckpointWriter::Flush() {
  MutexLock lock(&mu_);
  while (busy_) cv_.Wait(&mu_);
  return error_;
}

int64_t CheckpointWriter::written() const {
  MutexLock lock(&mu_);
  return written_;
}

int64_t CheckpointWriter::failed() const {
  MutexLock lock(&mu_);
  return failed_;
}

int64_t CheckpointWriter::skipped() const {
  MutexLock lock(&mu_);
  return skipped_;
}

void CheckpointWriter::Run() {
  MutexLock lock(&mu_);
  while (true) {
    while (!pending_.has_value() && !stop_) cv_.Wait(&mu_);
    if (!pending_) return;  // stopping with nothing left to write
    CheckpointData data = std::move(*pending_);
    pending_.reset();
    lock.Unlock();
    const Status result = WriteCheckpointFile(path_, data);
    // Said at once: a full disk must not go unnoticed until the run ends.
    if (!result.ok()) spdlog::error("{} (training goes on; the previous checkpoint is kept)", result.message());
    lock.Lock();
    if (result.ok()) {
      ++written_;
    } else {
      ++failed_;
      if (error_.ok()) error_ = result;
    }
    busy_ = false;
    cv_.NotifyAll();
  }
}

}  // namespace es
