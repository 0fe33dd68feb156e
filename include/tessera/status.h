// Status and StatusOr<T>: tessera's error type, shared by every part, including the preload
// library (no third-party dependency, no exceptions, cheap when OK, as leveldb's Status).
#pragma once

#include <cstdint>
#include <new>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "tessera/assert.h"

namespace tessera {

// The one list of status codes. The enumerators (kInvalidArgument), the names and metric labels
// ("invalid_argument") and the factories (InvalidArgumentError) all come from here.
// X(Name, "label"). The meanings follow the canonical (gRPC/abseil) codes; the Kubernetes
// client maps HTTP answers onto them: 409 AlreadyExists -> kAlreadyExists, 409 Conflict (stale
// resourceVersion) -> kAborted, 410 Gone (resourceVersion too old) -> kOutOfRange,
// 401 -> kUnauthenticated.
#define TESSERA_STATUS_ERROR_CODES(X)          \
  X(InvalidArgument, "invalid_argument")       \
  X(NotFound, "not_found")                     \
  X(AlreadyExists, "already_exists")           \
  X(ResourceExhausted, "resource_exhausted")   \
  X(FailedPrecondition, "failed_precondition") \
  X(Aborted, "aborted")                        \
  X(OutOfRange, "out_of_range")                \
  X(PermissionDenied, "permission_denied")     \
  X(Unauthenticated, "unauthenticated")        \
  X(Unavailable, "unavailable")                \
  X(DataLoss, "data_loss")                     \
  X(Internal, "internal")                      \
  X(InvalidInput, "invalid_input")
#define TESSERA_STATUS_CODES(X) \
  X(Ok, "ok")                   \
  TESSERA_STATUS_ERROR_CODES(X)

enum class StatusCode : std::uint8_t {
#define TESSERA_STATUS_ENUM(name, label) k##name,
  TESSERA_STATUS_CODES(TESSERA_STATUS_ENUM)
#undef TESSERA_STATUS_ENUM
};

// "invalid_argument" for kInvalidArgument; "unknown" for a value outside the list.
std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message);

  static Status Ok() { return {}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "invalid_argument: gpu-memory: ..." or "ok".
  std::string ToString() const;

  // Returns a copy whose message is "context: message" (for errors; OK stays OK).
  Status WithContext(std::string_view context) const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// kInvalidArgument is a bad argument (a flag, a request parameter); kInvalidInput an input that
// was read but cannot be taken (a file, a manifest, a request body: empty, the wrong type, too
// large, not a regular file, a field out of range), with the field or path in the message.
//
// The one mapping of a Status to a process exit code (every binary; docs/protocol.md "Exit
// codes"): 0 ok, 2 usage (invalid argument), 3 an input not found or unreadable (not found, a
// read that failed), 4 an input invalid, 5 a service unavailable, 1 anything else (and, from the
// commands that answer yes or no, "no").
int ToExitCode(const Status& status);
// An input's error as the input's: a kInvalidArgument from a parser of what `path` held becomes
// kInvalidInput (the other codes stay). For loaders that read a file and parse it.
Status AsInputError(const Status& status);

// InvalidArgumentError(message), NotFoundError(message), ...: one factory per error code.
#define TESSERA_STATUS_FACTORY(name, label) Status name##Error(std::string message);
TESSERA_STATUS_ERROR_CODES(TESSERA_STATUS_FACTORY)
#undef TESSERA_STATUS_FACTORY

// StatusOr<T>: either a value or a non-OK Status. Accessing value() of an error is a bug
// (checked by TESSERA_ASSERT in debug builds).
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  // NOLINTNEXTLINE(google-explicit-constructor): implicit from an error, as absl::StatusOr.
  StatusOr(Status status) : status_(std::move(status)) {
    if (status_.ok()) status_ = InternalError("StatusOr constructed from an OK status");
  }
  // NOLINTNEXTLINE(google-explicit-constructor): implicit from a value, as absl::StatusOr.
  StatusOr(T value) : has_value_(true) { new (&storage_.value) T(std::move(value)); }

  StatusOr(const StatusOr& other) : status_(other.status_), has_value_(other.has_value_) {
    if (has_value_) new (&storage_.value) T(other.storage_.value);
  }
  StatusOr(StatusOr&& other) noexcept(std::is_nothrow_move_constructible_v<T>)
      : status_(std::move(other.status_)), has_value_(other.has_value_) {
    if (has_value_) new (&storage_.value) T(std::move(other.storage_.value));
  }
  StatusOr& operator=(StatusOr other) noexcept(std::is_nothrow_move_constructible_v<T>) {
    Reset();
    status_ = std::move(other.status_);
    has_value_ = other.has_value_;
    if (has_value_) new (&storage_.value) T(std::move(other.storage_.value));
    return *this;
  }
  ~StatusOr() { Reset(); }

  bool ok() const { return has_value_; }
  const Status& status() const { return status_; }

  T& value() & {
    TESSERA_ASSERT(has_value_, "value() of an error");
    return storage_.value;
  }
  const T& value() const& {
    TESSERA_ASSERT(has_value_, "value() of an error");
    return storage_.value;
  }
  T&& value() && {
    TESSERA_ASSERT(has_value_, "value() of an error");
    return std::move(storage_.value);
  }
  // The value, or `fallback` for an error.
  template <typename U>
  T value_or(U&& fallback) const& {
    return has_value_ ? storage_.value : static_cast<T>(std::forward<U>(fallback));
  }
  template <typename U>
  T value_or(U&& fallback) && {
    return has_value_ ? std::move(storage_.value) : static_cast<T>(std::forward<U>(fallback));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  void Reset() {
    if (has_value_) storage_.value.~T();
    has_value_ = false;
  }
  union Storage {
    Storage() {}
    ~Storage() {}
    T value;
  };
  Status status_;
  bool has_value_ = false;
  Storage storage_;
};

}  // namespace tessera

#define TESSERA_STATUS_CONCAT_INNER(a, b) a##b
#define TESSERA_STATUS_CONCAT(a, b) TESSERA_STATUS_CONCAT_INNER(a, b)

// Returns the Status of `expr` from the enclosing function if it is not OK.
#define TESSERA_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::tessera::Status tessera_status_ = (expr);        \
    if (!tessera_status_.ok()) return tessera_status_; \
  } while (false)

// `lhs = value of expr`, or returns its Status from the enclosing function.
#define TESSERA_ASSIGN_OR_RETURN(lhs, expr) \
  TESSERA_ASSIGN_OR_RETURN_IMPL(TESSERA_STATUS_CONCAT(tessera_statusor_, __LINE__), lhs, expr)
#define TESSERA_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()
