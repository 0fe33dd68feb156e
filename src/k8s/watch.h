// Watch events and the decoding of a watch stream: one JSON object per line
// ({"type":"ADDED","object":{...}}), lines split arbitrarily across HTTP chunks.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "tessera/status.h"

namespace tessera::k8s {

using Json = nlohmann::json;

enum class WatchEventType : std::uint8_t { kAdded, kModified, kDeleted, kBookmark, kError };

// "ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR".
std::string_view WatchEventTypeName(WatchEventType type);

struct WatchEvent {
  WatchEventType type = WatchEventType::kAdded;
  Json object;  // the object; for BOOKMARK only kind, apiVersion, metadata.resourceVersion
};

struct WatchOptions {
  std::string resource_version;  // "" = start with the current state (synthetic ADDED events)
  bool allow_watch_bookmarks = true;
  std::int64_t timeout_seconds = 0;  // server-side end of the watch; 0 = the server's default
  std::string label_selector;
  std::string field_selector;
};

// Parses one line of a watch stream. kInvalidArgument for a line that is not an event.
StatusOr<WatchEvent> ParseWatchEvent(std::string_view line);

// The error an ERROR event carries (its object is a metav1.Status): 410 -> kOutOfRange
// (IsGone), otherwise mapped like an HTTP answer with that code.
Status WatchErrorStatus(std::string_view path, const Json& status_object);

// Reassembles lines from chunks. Feed() calls `on_line` for every complete line (without the
// newline; empty lines are skipped) and stops early when it returns false. A line longer than
// `max_line_bytes` is an error (kResourceExhausted).
class LineSplitter {
 public:
  explicit LineSplitter(std::size_t max_line_bytes = 64u << 20) : max_line_bytes_(max_line_bytes) {}

  Status Feed(std::string_view chunk, const std::function<bool(std::string_view line)>& on_line);
  // What is left after the last newline (a final line without one), and clears it.
  std::string TakeRemainder();
  std::size_t buffered() const { return partial_.size(); }

 private:
  std::size_t max_line_bytes_;
  std::string partial_;
};

}  // namespace tessera::k8s
