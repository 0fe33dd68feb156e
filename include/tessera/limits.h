// The limits a container runs under: the node-written limits file (docs/design/0002 §6), or,
// when none exists, HAMi-core's environment variables (weaker trust). Dependency-free: the
// preload library parses these at start-up.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/model.h"
#include "tessera/status.h"

namespace tessera {

struct DeviceLimits {
  std::string uuid;                 // "GPU-…" / "MIG-…"
  std::uint64_t memory_bytes = 0;   // cap, contexts included
  std::uint32_t cores_percent = 0;  // 0: best effort
  std::uint64_t context_bytes = 0;  // charged per process per device at context creation
  std::uint64_t stream_bytes = 0;   // charged per stream (the driver's per-stream device memory)
};

struct Limits {
  std::string pod_uid;
  std::string pod;  // namespace/name
  std::string container;
  bool fail_closed = false;
  PriorityClass priority = PriorityClass::kNormal;
  SharingMode mode = SharingMode::kShared;
  ComputeMode compute = ComputeMode::kHard;  // how cores_percent is held
  // A hard share's period in ms (0: the default, a short bucket refilled continuously): the
  // share gets cores% x this of GPU time per period, then is held until the next period.
  std::uint32_t compute_window_ms = 0;
  std::vector<DeviceLimits> devices;
};

inline constexpr std::uint32_t kMinComputeWindowMs = 10;
inline constexpr std::uint32_t kMaxComputeWindowMs = 60'000;
// The one rule for a hard share's period (limits file, tessera run, pod annotation, decision):
// whole ms in [kMinComputeWindowMs, kMaxComputeWindowMs]. Parse: nullopt unless `text` is one.
bool IsComputeWindowMs(std::uint64_t ms);
std::optional<std::uint32_t> ParseComputeWindowMs(std::string_view text);
std::string ComputeWindowRange();  // "10-60000", for messages

// A limits file is a few lines; readers bound it to this (tessera/file.h ReadFile).
inline constexpr std::size_t kMaxLimitsFileBytes = std::size_t{64} << 10;
// Parses a limits file. Every error names the line and what is accepted; nothing is half-read.
StatusOr<Limits> ParseLimitsFile(std::string_view text);
// The canonical text of a limits file (ParseLimitsFile(FormatLimitsFile(l)) == l).
std::string FormatLimitsFile(const Limits& limits);

// HAMi-core's variables: a cap for every device, per CUDA index, and a compute share.
struct HamiLimits {
  std::optional<std::uint64_t> all_devices_bytes;        // CUDA_DEVICE_MEMORY_LIMIT
  std::vector<std::pair<int, std::uint64_t>> per_index;  // CUDA_DEVICE_MEMORY_LIMIT_<i>
  std::optional<std::uint32_t> sm_percent;               // CUDA_DEVICE_SM_LIMIT
  bool any() const { return all_devices_bytes || !per_index.empty() || sm_percent; }
  // The cap of CUDA device `index`, if any: its own variable, else the all-devices one.
  std::optional<std::uint64_t> ForIndex(int index) const;
};

// HAMi's memory units: "4096m" = 4 GiB; g/m/k (either case) = GiB/MiB/KiB; no suffix = bytes.
// Not a Kubernetes quantity ("4Gi" is an error here).
StatusOr<std::uint64_t> ParseHamiMemory(std::string_view text);

// Reads the HAMi variables from `environ`-style "KEY=VALUE" entries (so tests need not touch the
// process environment).
StatusOr<HamiLimits> ParseHamiEnvironment(const char* const* environment);

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" from the 16 bytes of a CUuuid, as nvidia-smi and
// CUDA_VISIBLE_DEVICES spell it.
std::string FormatGpuUuid(const unsigned char* bytes16);

}  // namespace tessera
