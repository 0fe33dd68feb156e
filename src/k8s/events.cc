#include "k8s/events.h"

#include <ctime>

#include "tessera/log.h"

#include "k8s/paths.h"

namespace tessera::k8s {
namespace {

std::string Rfc3339(std::chrono::system_clock::time_point t) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(t);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

}  // namespace

Json WarningEvent(const Json& involved, std::string_view reason, std::string_view message,
                  std::string_view component, std::string_view host,
                  std::chrono::system_clock::time_point now) {
  const std::string ns = involved.value("namespace", "default"), name = involved.value("name", "");
  const std::string stamp = Rfc3339(now);
  Json source = {{"component", std::string(component)}};
  if (!host.empty()) source["host"] = std::string(host);
  // Event names must be DNS subdomains; a refused pod may have no name (generateName).
  const std::string prefix = name.empty() ? std::string(component) : name;
  return {{"apiVersion", "v1"},
          {"kind", "Event"},
          {"metadata", {{"generateName", prefix + ".tessera-"}, {"namespace", ns}}},
          {"involvedObject", involved},
          {"reason", std::string(reason)},
          {"message", std::string(message)},
          {"type", "Warning"},
          {"source", source},
          {"firstTimestamp", stamp},
          {"lastTimestamp", stamp},
          {"count", 1}};
}

EventRecorder::EventRecorder(Client& client, std::string component, std::string host,
                             std::size_t queue_limit)
    : client_(client),
      component_(std::move(component)),
      host_(std::move(host)),
      limit_(queue_limit) {
  thread_ = std::thread([this] { Run(); });
}

EventRecorder::~EventRecorder() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    stop_deadline_ = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  }
  cv_.notify_all();
  thread_.join();
}

bool EventRecorder::Warn(const Json& involved, std::string_view reason, std::string_view message) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.size() >= limit_) {
      ++dropped_;
      return false;
    }
    queue_.push_back(WarningEvent(involved, reason, message, component_, host_,
                                  std::chrono::system_clock::now()));
  }
  cv_.notify_one();
  return true;
}

std::uint64_t EventRecorder::posted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return posted_;
}

std::uint64_t EventRecorder::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

void EventRecorder::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_.wait(lock, [this] { return queue_.empty() && !busy_; });
}

void EventRecorder::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) break;  // stopping, nothing left
    if (stop_ &&
        std::chrono::steady_clock::now() > stop_deadline_) {  // a shutdown does not wait on the API
      dropped_ += queue_.size();
      queue_.clear();
      break;
    }
    Json event = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    const std::string ns = event["metadata"].value("namespace", "default");
    auto r = client_.Create(EventsPath(ns), event);
    if (!r.ok()) {
      TESSERA_LOG(kWarn, kK8s, "posting a %s Event in %s: %s", event.value("reason", "").c_str(),
                  ns.c_str(), r.status().ToString().c_str());
    }
    lock.lock();
    busy_ = false;
    ++(r.ok() ? posted_ : dropped_);
    idle_.notify_all();
  }
  busy_ = false;
  idle_.notify_all();
}

}  // namespace tessera::k8s
