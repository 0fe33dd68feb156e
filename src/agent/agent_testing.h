// A GpuSource for tests: fixed GPUs and a queue of health events.
#pragma once

#include <deque>
#include <mutex>
#include <thread>

#include "agent/nvml.h"

namespace tessera::agent {

inline GpuFacts MakeGpu(int index, std::uint64_t memory = 80ULL << 30) {
  GpuFacts gpu;
  gpu.uuid = "GPU-0000000" + std::to_string(index);
  gpu.index = index;
  gpu.model = "NVIDIA H100 80GB HBM3";
  gpu.memory_bytes = memory;
  gpu.sm_count = 132;
  gpu.numa_node = index / 4;
  return gpu;
}

class FakeGpuSource : public GpuSource {
 public:
  explicit FakeGpuSource(std::vector<GpuFacts> gpus) : gpus_(std::move(gpus)) {}

  StatusOr<std::vector<GpuFacts>> Discover() override {
    std::lock_guard<std::mutex> lock(mu_);
    ++discoveries_;
    return gpus_;
  }
  StatusOr<std::optional<HealthEvent>> WaitHealthEvent(std::chrono::milliseconds timeout) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!events_.empty()) {
        HealthEvent e = events_.front();
        events_.pop_front();
        return std::optional<HealthEvent>(e);
      }
    }
    std::this_thread::sleep_for(std::min(timeout, std::chrono::milliseconds(2)));
    return std::optional<HealthEvent>();
  }
  void Push(HealthEvent event) {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(event));
  }
  int discoveries() {
    std::lock_guard<std::mutex> lock(mu_);
    return discoveries_;
  }

 private:
  std::mutex mu_;
  std::vector<GpuFacts> gpus_;
  std::deque<HealthEvent> events_;
  int discoveries_ = 0;
};

}  // namespace tessera::agent
