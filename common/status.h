// Status and StatusOr: errors as values inside ensemble-serve.
//
// Every fallible call inside the project returns a Status (or StatusOr<T>);
// exceptions from LibTorch, yaml-cpp or the OS are caught at the edge of the
// component that calls them and turned into a Status with a clear message.
// The codes are the gRPC canonical codes, so the router maps a Status onto a
// grpc::Status one to one and the wire error is exactly what the core said.
//
// Thread safety: values; safe to copy between threads.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "common/status_macros.h"

namespace es {

enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

// The canonical upper-case name of a code, e.g. "INVALID_ARGUMENT".
const char* StatusCodeName(StatusCode code);

// How many of text's first bytes, at most max_bytes, end on a whole UTF-8
// character: a cut there leaves no character in halves (a JSON answer or
// log line stays valid UTF-8 where the text was).
size_t Utf8Prefix(std::string_view text, size_t max_bytes);

// Text a client chose (a model, input, output or region name, a datatype,
// a version), as an error message names it: as it is up to kMaxShownBytes,
// else its first whole characters within that and "...". A gRPC request may
// carry names as long as its message (over 100 MiB), and each error would
// copy such a name into its message and the answer's trailer, whose size
// clients limit far below that.
inline constexpr size_t kMaxShownBytes = 256;
std::string ShownClientText(std::string_view text);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
  static Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  static Status DeadlineExceeded(std::string m) { return {StatusCode::kDeadlineExceeded, std::move(m)}; }
  static Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
  static Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
  static Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
  static Status PermissionDenied(std::string m) { return {StatusCode::kPermissionDenied, std::move(m)}; }
  static Status Unauthenticated(std::string m) { return {StatusCode::kUnauthenticated, std::move(m)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message" (or "OK").
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

namespace internal {
// Prints "value of an error: <status>" to stderr and aborts.
[[noreturn]] void DieOnValueOfError(const Status& status);
}  // namespace internal

// Either a value or a non-OK Status. Accessing the value of an error is a
// bug, and it aborts with the error's text rather than read an empty
// optional; an OK Status with no value is turned into an internal error, so
// ok() is true exactly when there is a value.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status)  // NOLINT: implicit by design, like absl
      : status_(status.ok() ? Status::Internal("StatusOr made from OK without a value") : std::move(status)) {}
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return Checked(); }
  const T& value() const& { return Checked(); }
  T&& value() && { return std::move(Checked()); }
  T* operator->() { return &Checked(); }
  const T* operator->() const { return &Checked(); }
  T& operator*() & { return Checked(); }
  const T& operator*() const& { return Checked(); }

 private:
  T& Checked() {
    if (!value_) internal::DieOnValueOfError(status_);
    return *value_;
  }
  const T& Checked() const {
    if (!value_) internal::DieOnValueOfError(status_);
    return *value_;
  }
  Status status_;
  std::optional<T> value_;
};

}  // namespace es
