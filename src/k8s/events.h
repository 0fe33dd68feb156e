// Warning Events (core v1) posted by tessera's daemons, from a background thread so that the
// caller (a webhook answering the API server, the node agent's drift pass) never waits on the
// API. The queue is bounded; what does not fit, or fails to post, is counted as dropped.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "k8s/client.h"

namespace tessera::k8s {

class EventRecorder {
 public:
  // `component`: source.component (tessera-node, tessera-scheduler); `host`: source.host.
  EventRecorder(Client& client, std::string component, std::string host,
                std::size_t queue_limit = 256);
  ~EventRecorder();  // posts what is queued for up to 3 s (plus one post in flight), drops the rest
  EventRecorder(const EventRecorder&) = delete;
  EventRecorder& operator=(const EventRecorder&) = delete;

  // Queues a Warning about `involved` ({apiVersion, kind, name[, namespace, uid]}); the Event
  // goes into its namespace ("default" for cluster objects). False when the queue is full.
  bool Warn(const Json& involved, std::string_view reason, std::string_view message);
  std::uint64_t posted() const;
  std::uint64_t dropped() const;
  // Blocks until everything queued so far is posted or dropped (tests).
  void Flush();

 private:
  void Run();
  Client& client_;
  const std::string component_, host_;
  const std::size_t limit_;
  mutable std::mutex mu_;
  std::condition_variable cv_, idle_;
  std::deque<Json> queue_;
  bool busy_ = false, stop_ = false;
  std::chrono::steady_clock::time_point stop_deadline_{};  // what is queued after it is dropped
  std::uint64_t posted_ = 0, dropped_ = 0;
  std::thread thread_;
};

// The Event object (exposed for tests).
Json WarningEvent(const Json& involved, std::string_view reason, std::string_view message,
                  std::string_view component, std::string_view host,
                  std::chrono::system_clock::time_point now);

}  // namespace tessera::k8s
