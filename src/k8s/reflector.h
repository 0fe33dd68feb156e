// The core of an informer: keeps a handler in step with one collection (e.g. /api/v1/pods).
//
//   list (all pages) ─► OnSync(items, rv) ─► watch from rv ─► OnEvent(...) for each event
//        ▲                                      │  every event and BOOKMARK advances rv
//        │ 410 Gone (HTTP or ERROR event)       │ the watch ends (server timeout, closed
//        └──────────────────────────────────────┤ stream): watch again from the newest rv
//                                               │ other errors: the same, after a backoff
//
// Backoff: exponential with jitter from ReflectorOptions::initial_backoff doubling to
// max_backoff; reset by a healthy watch (one that delivered an event or lasted a while).
// Handler calls come from the Run() thread only, in order.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <stop_token>
#include <string>
#include <vector>

#include "k8s/client.h"

namespace tessera::k8s {

class ReflectorHandler {
 public:
  virtual ~ReflectorHandler() = default;
  // The full state after each (re)list: replace everything known about the collection.
  virtual void OnSync(std::vector<Json> items, const std::string& resource_version) = 0;
  // ADDED, MODIFIED or DELETED (bookmarks and errors are handled by the Reflector).
  virtual void OnEvent(WatchEventType type, const Json& object) = 0;
};

struct ReflectorOptions {
  std::string label_selector;
  std::string field_selector;
  std::int64_t page_size = 500;
  std::chrono::milliseconds initial_backoff{200};
  std::chrono::milliseconds max_backoff{30000};
  // Each watch asks the server to end it after a random time in [min, max] seconds, so that
  // watches are spread and renewed (client-go does the same).
  std::int64_t min_watch_seconds = 300;
  std::int64_t max_watch_seconds = 600;
};

struct ReflectorStats {
  std::int64_t lists = 0;    // successful lists (the first one included)
  std::int64_t watches = 0;  // watch requests made
  std::int64_t gone = 0;     // 410 answers that forced a relist
  std::int64_t errors = 0;   // failed lists and watches (each followed by a backoff)
  std::int64_t bookmarks = 0;
};

class Reflector {
 public:
  Reflector(Client& client, std::string list_path, ReflectorHandler& handler,
            ReflectorOptions options = {});

  // Blocks until `stop` is requested. An idle watch or a backoff ends at once (~50 ms); a
  // list in flight is finished first (bounded by Config::timeout).
  void Run(std::stop_token stop);

  // True once the first list has been delivered to OnSync.
  bool HasSynced() const { return synced_.load(); }
  // The newest resourceVersion seen (list, event or bookmark).
  std::string LastResourceVersion() const;
  ReflectorStats stats() const;

  // The next watch starts from this resourceVersion instead of the newest one (tests: a
  // version that is too old must lead to a relist).
  void SetNextWatchResourceVersionForTest(std::string resource_version);

 private:
  void SetResourceVersion(std::string rv);

  Client& client_;
  const std::string path_;
  ReflectorHandler& handler_;
  const ReflectorOptions options_;

  mutable std::mutex mu_;
  std::string resource_version_;
  std::string next_watch_rv_for_test_;

  std::atomic<bool> synced_{false};
  std::atomic<std::int64_t> lists_{0};
  std::atomic<std::int64_t> watches_{0};
  std::atomic<std::int64_t> gone_{0};
  std::atomic<std::int64_t> errors_{0};
  std::atomic<std::int64_t> bookmarks_{0};
};

}  // namespace tessera::k8s
