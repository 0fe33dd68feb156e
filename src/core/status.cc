#include "tessera/status.h"

namespace tessera {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
#define TESSERA_STATUS_CASE(name, label) \
  case StatusCode::k##name:              \
    return label;
    TESSERA_STATUS_CODES(TESSERA_STATUS_CASE)
#undef TESSERA_STATUS_CASE
  }
  return "unknown";
}

Status::Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {
  if (code_ == StatusCode::kOk) message_.clear();
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  std::string out(StatusCodeName(code_));
  out += ": ";
  out += message_;
  return out;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string message(context);
  message += ": ";
  message += message_;
  return {code_, std::move(message)};
}

int ToExitCode(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return 0;
    case StatusCode::kInvalidArgument:
      return 2;
    case StatusCode::kNotFound:
    case StatusCode::kDataLoss:
      return 3;
    case StatusCode::kInvalidInput:
      return 4;
    case StatusCode::kUnavailable:
      return 5;
    default:
      return 1;
  }
}

Status AsInputError(const Status& status) {
  if (status.code() != StatusCode::kInvalidArgument) return status;
  return InvalidInputError(status.message());
}

#define TESSERA_STATUS_FACTORY(name, label) \
  Status name##Error(std::string m) { return {StatusCode::k##name, std::move(m)}; }
TESSERA_STATUS_ERROR_CODES(TESSERA_STATUS_FACTORY)
#undef TESSERA_STATUS_FACTORY

}  // namespace tessera
