#include "k8s/watch.h"

#include <string>

#include "k8s/errors.h"

namespace tessera::k8s {

std::string_view WatchEventTypeName(WatchEventType type) {
  switch (type) {
    case WatchEventType::kAdded:
      return "ADDED";
    case WatchEventType::kModified:
      return "MODIFIED";
    case WatchEventType::kDeleted:
      return "DELETED";
    case WatchEventType::kBookmark:
      return "BOOKMARK";
    case WatchEventType::kError:
      return "ERROR";
  }
  return "UNKNOWN";
}

StatusOr<WatchEvent> ParseWatchEvent(std::string_view line) {
  Json parsed = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object()) {
    return InvalidArgumentError("watch: a line is not a JSON object: \"" +
                                std::string(line.substr(0, 120)) + "\"");
  }
  const auto type = parsed.find("type");
  const auto object = parsed.find("object");
  if (type == parsed.end() || !type->is_string() || object == parsed.end() ||
      !object->is_object()) {
    return InvalidArgumentError("watch: an event without \"type\" or \"object\"");
  }
  WatchEvent event;
  const std::string& name = type->get_ref<const std::string&>();
  if (name == "ADDED") {
    event.type = WatchEventType::kAdded;
  } else if (name == "MODIFIED") {
    event.type = WatchEventType::kModified;
  } else if (name == "DELETED") {
    event.type = WatchEventType::kDeleted;
  } else if (name == "BOOKMARK") {
    event.type = WatchEventType::kBookmark;
  } else if (name == "ERROR") {
    event.type = WatchEventType::kError;
  } else {
    return InvalidArgumentError("watch: unknown event type \"" + name + "\"");
  }
  event.object = std::move(*object);
  return event;
}

Status WatchErrorStatus(std::string_view path, const Json& status_object) {
  int code = 500;
  const auto c = status_object.find("code");
  if (c != status_object.end() && c->is_number_integer()) code = c->get<int>();
  // The Status object is the body an HTTP error would have had.
  return ErrorFromResponse("WATCH", path, code, status_object.dump());
}

Status LineSplitter::Feed(std::string_view chunk,
                          const std::function<bool(std::string_view line)>& on_line) {
  while (!chunk.empty()) {
    const std::size_t newline = chunk.find('\n');
    if (newline == std::string_view::npos) {
      if (partial_.size() + chunk.size() > max_line_bytes_) {
        return ResourceExhaustedError("watch: an event is longer than " +
                                      std::to_string(max_line_bytes_) + " bytes");
      }
      partial_.append(chunk);
      return Status::Ok();
    }
    std::string_view line = chunk.substr(0, newline);
    chunk.remove_prefix(newline + 1);
    if (!partial_.empty()) {
      partial_.append(line);
      std::string whole = std::move(partial_);
      partial_.clear();
      if (!whole.empty() && whole.back() == '\r') whole.pop_back();
      if (!whole.empty() && !on_line(whole)) return Status::Ok();
      continue;
    }
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!line.empty() && !on_line(line)) return Status::Ok();
  }
  return Status::Ok();
}

std::string LineSplitter::TakeRemainder() {
  std::string rest = std::move(partial_);
  partial_.clear();
  return rest;
}

}  // namespace tessera::k8s
