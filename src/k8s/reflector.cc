#include "k8s/reflector.h"

#include <condition_variable>
#include <random>
#include <utility>

#include "tessera/log.h"

#include "k8s/backoff.h"

namespace tessera::k8s {
namespace {

// A watch that delivered something, or lasted this long, was healthy: the backoff restarts.
constexpr auto kHealthyWatch = std::chrono::seconds(10);

}  // namespace

Reflector::Reflector(Client& client, std::string list_path, ReflectorHandler& handler,
                     ReflectorOptions options)
    : client_(client),
      path_(std::move(list_path)),
      handler_(handler),
      options_(std::move(options)) {}

std::string Reflector::LastResourceVersion() const {
  std::lock_guard<std::mutex> lock(mu_);
  return resource_version_;
}

void Reflector::SetResourceVersion(std::string rv) {
  if (rv.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  resource_version_ = std::move(rv);
}

void Reflector::SetNextWatchResourceVersionForTest(std::string resource_version) {
  std::lock_guard<std::mutex> lock(mu_);
  next_watch_rv_for_test_ = std::move(resource_version);
}

ReflectorStats Reflector::stats() const {
  ReflectorStats s;
  s.lists = lists_.load();
  s.watches = watches_.load();
  s.gone = gone_.load();
  s.errors = errors_.load();
  s.bookmarks = bookmarks_.load();
  return s;
}

void Reflector::Run(std::stop_token stop) {
  Backoff backoff(options_.initial_backoff, options_.max_backoff);
  std::mt19937_64 rng(std::random_device{}());
  std::mutex sleep_mu;
  std::condition_variable_any sleep_cv;
  // Sleeps for `delay` or until stop is requested.
  auto pause = [&](std::chrono::milliseconds delay) {
    std::unique_lock<std::mutex> lock(sleep_mu);
    sleep_cv.wait_for(lock, stop, delay, [] { return false; });
  };

  bool need_list = true;
  while (!stop.stop_requested()) {
    if (need_list) {
      ListOptions list_options;
      list_options.label_selector = options_.label_selector;
      list_options.field_selector = options_.field_selector;
      list_options.limit = options_.page_size;
      StatusOr<ListResult> list = client_.List(path_, list_options);
      if (stop.stop_requested()) return;
      if (!list.ok()) {
        ++errors_;
        TESSERA_LOG(kWarn, kK8s, "reflector %s: list failed: %s", path_.c_str(),
                    list.status().ToString().c_str());
        pause(backoff.Next());
        continue;
      }
      SetResourceVersion(list->resource_version);
      handler_.OnSync(std::move(list->items), list->resource_version);
      synced_ = true;
      ++lists_;
      need_list = false;
    }
    WatchOptions watch;
    {
      std::lock_guard<std::mutex> lock(mu_);
      watch.resource_version = resource_version_;
      if (!next_watch_rv_for_test_.empty()) {
        watch.resource_version = std::move(next_watch_rv_for_test_);
        next_watch_rv_for_test_.clear();
      }
    }
    watch.allow_watch_bookmarks = true;
    watch.label_selector = options_.label_selector;
    watch.field_selector = options_.field_selector;
    if (options_.max_watch_seconds > 0) {
      std::uniform_int_distribution<std::int64_t> pick(
          std::min(options_.min_watch_seconds, options_.max_watch_seconds),
          options_.max_watch_seconds);
      watch.timeout_seconds = pick(rng);
    }

    std::int64_t delivered = 0;
    const auto started = std::chrono::steady_clock::now();
    ++watches_;
    const Status ended = client_.Watch(
        path_, watch,
        [&](const WatchEvent& event) {
          ++delivered;
          if (event.type == WatchEventType::kBookmark) {
            ++bookmarks_;
          } else {
            handler_.OnEvent(event.type, event.object);
          }
          SetResourceVersion(ResourceVersionOf(event.object));
          return !stop.stop_requested();
        },
        stop);
    if (stop.stop_requested()) return;

    const bool healthy =
        delivered > 0 || std::chrono::steady_clock::now() - started >= kHealthyWatch;
    if (healthy) backoff.Reset();
    if (IsGone(ended)) {
      // The version is older than the server keeps: start over from a fresh list. Straight
      // away, unless even the version of the list we just made was refused.
      ++gone_;
      TESSERA_LOG(kInfo, kK8s, "reflector %s: %s; listing again", path_.c_str(),
                  ended.ToString().c_str());
      need_list = true;
      if (!healthy && watch.resource_version == LastResourceVersion()) pause(backoff.Next());
    } else if (!ended.ok()) {
      ++errors_;
      TESSERA_LOG(kWarn, kK8s, "reflector %s: watch failed: %s", path_.c_str(),
                  ended.ToString().c_str());
      pause(backoff.Next());
    } else if (!healthy) {
      pause(backoff.Next());  // the server ended an empty watch at once: do not spin
    }
  }
}

}  // namespace tessera::k8s
