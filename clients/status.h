// es::client::Status and Result<T>: the outcome of a client call.
//
// Contract: a Status is either OK or a gRPC status code with the server's (or
// the transport's) message, unchanged. Errors found on the client side (an
// output missing from a response, a payload whose size disagrees with its
// shape) use the code a server would have used (NOT_FOUND, INVALID_ARGUMENT,
// INTERNAL...) with a message naming the tensor. Result<T> holds either a
// value or a non-OK Status; value() on an error is a programming error
// (asserts in debug builds, undefined otherwise). Plain values: copyable,
// no shared state, so thread-safe as ints are.
#pragma once

#include <grpcpp/support/status.h>

#include <cassert>
#include <optional>
#include <string>
#include <utility>

#include "common/status_macros.h"  // ES_RETURN_IF_ERROR, ES_ASSIGN_OR_RETURN work on Status and Result

namespace es::client {

class Status {
 public:
  Status() = default;  // OK
  Status(grpc::StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status FromGrpc(const grpc::Status& status) {
    return Status(status.error_code(), status.error_message());
  }

  bool ok() const { return code_ == grpc::StatusCode::OK; }
  grpc::StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "OK", or "CODE_NAME: message".
  std::string ToString() const;

 private:
  grpc::StatusCode code_ = grpc::StatusCode::OK;
  std::string message_;
};

// The canonical upper-case name of a gRPC status code ("DEADLINE_EXCEEDED").
const char* CodeName(grpc::StatusCode code);

template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit, like absl::StatusOr
  Result(Status status) : status_(std::move(status)) {  // NOLINT
    assert(!status_.ok() && "a Result built from a Status must hold an error");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }  // OK when a value is held
  T& value() & {
    assert(ok());
    return *value_;
  }
  const T& value() const& {
    assert(ok());
    return *value_;
  }
  T&& value() && {
    assert(ok());
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace es::client
