#include "agent/node_agent.h"

#include <algorithm>
#include <map>
#include <random>
#include <thread>

#include "tessera/log.h"

namespace tessera::agent {

using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

Status PrintInventory(GpuSource& source, const std::string& node_name,
                      const std::string& agent_version, const ManagedSpec& managed,
                      std::ostream& out) {
  TESSERA_ASSIGN_OR_RETURN(std::vector<GpuFacts> gpus, source.Discover());
  TESSERA_ASSIGN_OR_RETURN(std::set<std::string> owned, ResolveManaged(managed, gpus));
  // Health events already pending (registered now, so only what NVML delivers at once).
  std::map<std::string, std::string> unhealthy;
  for (int i = 0; i < 64; ++i) {
    StatusOr<std::optional<HealthEvent>> event = source.WaitHealthEvent(milliseconds(0));
    if (!event.ok()) {
      TESSERA_LOG(kWarn, kAgent, "GPU health not checked: %s", event.status().ToString().c_str());
      break;
    }
    if (!event->has_value()) break;
    if (!(*event)->reason.empty()) unhealthy.emplace((*event)->uuid, (*event)->reason);
  }
  InventoryTracker tracker;
  tracker.Update(BuildContent(node_name, agent_version, gpus, owned, unhealthy),
                 std::chrono::system_clock::now());
  out << ToJson(tracker.current()) << "\n";
  return Status::Ok();
}

Status RunAgentLoop(const LoopOptions& options, GpuSource& source, const PublishFn& publish,
                    const std::function<bool()>& stopping) {
  TESSERA_ASSIGN_OR_RETURN(std::vector<GpuFacts> gpus, source.Discover());
  TESSERA_ASSIGN_OR_RETURN(std::set<std::string> managed, ResolveManaged(options.managed, gpus));
  // What another device plugin (NVIDIA's) has handed out is never tessera's to give.
  const auto drop_taken = [&](std::set<std::string>& m) {
    if (!options.taken_by_others) return;
    for (const std::string& uuid : options.taken_by_others()) {
      if (m.erase(uuid) != 0)
        TESSERA_LOG(kInfo, kAgent, "GPU %s is held through another device plugin: not managed",
                    uuid.c_str());
    }
  };
  drop_taken(managed);
  TESSERA_LOG(kInfo, kAgent, "%zu GPUs, %zu managed", gpus.size(), managed.size());
  std::map<std::string, std::string> unhealthy;
  InventoryTracker tracker;
  tracker.ContinueAfter(options.continue_after_generation);

  milliseconds retry_delay = options.retry_initial;
  std::mt19937_64 rng(std::random_device{}());
  auto next_refresh = SteadyClock::now() + options.interval;
  auto retry_at = SteadyClock::time_point::max();
  bool dirty = true;  // publish now
  bool events_broken = false;
  while (!stopping()) {
    auto now = SteadyClock::now();
    if (now >= next_refresh) {
      StatusOr<std::vector<GpuFacts>> fresh = source.Discover();
      if (fresh.ok()) {
        gpus = std::move(fresh).value();
        // A GPU that disappeared is gone from the inventory; managed follows the spec.
        if (StatusOr<std::set<std::string>> m = ResolveManaged(options.managed, gpus); m.ok()) {
          managed = std::move(m).value();
          drop_taken(managed);
        } else {
          TESSERA_LOG(kWarn, kAgent, "%s", m.status().message().c_str());
        }
      } else {
        TESSERA_LOG(kWarn, kAgent, "rediscovery failed, keeping the last inventory: %s",
                    fresh.status().ToString().c_str());
      }
      next_refresh = now + options.interval;
      dirty = true;
    }
    if (dirty || now >= retry_at) {
      if (tracker.Update(
              BuildContent(options.node_name, options.agent_version, gpus, managed, unhealthy),
              std::chrono::system_clock::now())) {
        TESSERA_LOG(kInfo, kAgent, "inventory generation %lld",
                    static_cast<long long>(tracker.current().generation));
      }
      Status published = publish(tracker.current());
      dirty = false;
      if (published.ok()) {
        retry_delay = options.retry_initial;
        retry_at = SteadyClock::time_point::max();
      } else {
        std::uniform_int_distribution<std::int64_t> jitter(retry_delay.count() / 2,
                                                           retry_delay.count());
        const milliseconds wait(jitter(rng));
        TESSERA_LOG(kWarn, kAgent, "publish failed, retrying in %lld ms: %s",
                    static_cast<long long>(wait.count()), published.ToString().c_str());
        retry_at = SteadyClock::now() + wait;
        retry_delay = std::min(retry_delay * 2, options.retry_max);
      }
    }
    now = SteadyClock::now();
    const auto until = std::min({next_refresh, retry_at, now + milliseconds(1000)});
    const auto wait =
        std::max(milliseconds(0), std::chrono::duration_cast<milliseconds>(until - now));
    if (events_broken) {
      std::this_thread::sleep_for(wait);
      continue;
    }
    StatusOr<std::optional<HealthEvent>> event = source.WaitHealthEvent(wait);
    if (!event.ok()) {
      TESSERA_LOG(kWarn, kAgent, "health events unavailable, GPU health is not watched: %s",
                  event.status().ToString().c_str());
      events_broken = true;
      continue;
    }
    if (event->has_value() && !(*event)->reason.empty()) {
      const HealthEvent& e = **event;
      if (unhealthy.emplace(e.uuid, e.reason).second) {
        TESSERA_LOG(kWarn, kAgent, "GPU %s unhealthy: %s", e.uuid.c_str(), e.reason.c_str());
        dirty = true;
      }
    }
  }
  return Status::Ok();
}

}  // namespace tessera::agent
