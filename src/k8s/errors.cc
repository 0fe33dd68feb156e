#include "k8s/errors.h"

#include <string>

#include <nlohmann/json.hpp>

namespace tessera::k8s {

StatusCode StatusCodeForHttp(int http_status, std::string_view reason) {
  switch (http_status) {
    case 400:
    case 405:
    case 413:
    case 415:
    case 422:
      return StatusCode::kInvalidArgument;
    case 401:
      return StatusCode::kUnauthenticated;
    case 403:
      return StatusCode::kPermissionDenied;
    case 404:
      return StatusCode::kNotFound;
    case 409:
      return reason == "AlreadyExists" ? StatusCode::kAlreadyExists : StatusCode::kAborted;
    case 410:
      return StatusCode::kOutOfRange;
    case 429:
      return StatusCode::kResourceExhausted;
    case 500:
    case 501:
      return StatusCode::kInternal;
    default:
      break;
  }
  if (http_status >= 500) return StatusCode::kUnavailable;
  if (http_status >= 400) return StatusCode::kFailedPrecondition;
  return StatusCode::kInternal;  // 1xx/3xx: not an answer the client expects
}

Status ErrorFromResponse(std::string_view method, std::string_view path, int http_status,
                         std::string_view body) {
  std::string reason;
  std::string detail;
  const nlohmann::json status = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (status.is_object() && status.value("kind", "") == "Status") {
    const auto r = status.find("reason");
    if (r != status.end() && r->is_string()) reason = r->get<std::string>();
    const auto m = status.find("message");
    if (m != status.end() && m->is_string()) detail = m->get<std::string>();
  } else if (!body.empty()) {
    constexpr std::size_t kQuote = 200;
    detail = "\"" + std::string(body.substr(0, kQuote)) + (body.size() > kQuote ? "...\"" : "\"");
  }
  std::string message(method);
  message += ' ';
  message += path;
  message += ": ";
  message += std::to_string(http_status);
  if (!reason.empty()) {
    message += ' ';
    message += reason;
  }
  if (!detail.empty()) {
    message += ": ";
    message += detail;
  }
  return {StatusCodeForHttp(http_status, reason), std::move(message)};
}

}  // namespace tessera::k8s
