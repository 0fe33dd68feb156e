// Compute drift (issue #22, ADR 0017 §drift): the driver's own per-process utilization (NVML
// samples), summed per container over a sliding window, against the container's grant. The
// preload library's counters and gate cannot be trusted for this — the tenant can write its own
// region — and a process whose CUDA calls bypass the library is never governed at all, so the
// check reads only what the tenant cannot write: NVML, the process's cgroup, the limits file.
//
// A container is flagged once per episode — an episode begins when the condition holds and ends
// once it has not held for a whole window — for:
//   - kOverHardShare: a hard share s, and its processes ran on the SMs more than s + margin of
//     the window (a rewritten gate, a process outside the library);
//   - kTookFromWaiting: a work-conserving share s, above s + margin while another container of
//     the GPU with a share got less than its share - margin and waited for others (`waited_ns`
//     rose by at least `min_waited` of the time measured): borrowing idle time is
//     allowed, taking time another tenant asked for is not. That evidence is the other tenant's
//     own region, which it could inflate, so this finding is reported, never acted on
//     (`enforceable` false);
//   - kUngoverned: a process of the container (by cgroup) ran on the SMs for at least
//     `min_ungoverned` of the window while holding no live slot of the container's region, or
//     not mapping the library (its CUDA calls never reached the library).
// A GPU whose samples cannot be read is reported (kNoSamples), once per episode too.
//
// Busy time from samples (measured on the H200, driver 580, docs/benchmarks.md; NVML's reference
// says the same): a read of `nvmlDeviceGetProcessUtilization(lastSeen)` returns one sample per
// process that ran since `lastSeen` (an idle period's read lists it at 0 %), its SM percentage
// averaged over the driver's samples since `lastSeen`, stamped at the newest of them. So a sample's
// percentage applies to the span from the stamp the read asked after to its own stamp (from a
// process's previous sample where a read returns several of one process), prorated where that span
// reaches back past the window. A read after no stamp (the first on a GPU, or after a wall clock
// stepped back) averages over the driver's whole buffer, an unknown span: it only sets the stamp,
// so nothing from before the first evaluation is held against a tenant (an agent that restarted).
// Processes of one container at the same stamp add up to at most the span; under MPS, where they
// can run at the same time, the largest counts (a lower bound of their union).
//
// Pure (no NVML, no files): the node agent feeds it (drift_actions.cc); tests script it.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tessera/limits.h"

#include "agent/nvml.h"

namespace tessera::agent {

struct ComputeDriftOptions {
  std::uint64_t window_us = 10'000'000;
  double margin = 0.10;          // of the GPU's time, above or below a share
  double min_waited = 0.10;      // of the window: "waited for the GPU"
  double min_ungoverned = 0.05;  // of the window: an ungoverned process's use
};

// One container on one GPU at this evaluation.
struct ComputeTenant {
  std::string key;  // stable across evaluations (container id / GPU)
  std::string uuid;
  std::uint32_t share_percent = 0;  // 0: no share (nothing to exceed)
  ComputeMode mode = ComputeMode::kHard;
  std::set<unsigned int> pids;        // its processes (host PIDs, by cgroup)
  std::set<unsigned int> ungoverned;  // of those, outside the library (no live slot, or unmapped)
  std::uint64_t waited_ns = 0;  // time it waited for others so far (its region: priority holds,
                                // and a work-conserving share's turns)
  bool spatial = false;         // MPS: its processes can run on the SMs at the same time
};

struct ComputeFinding {
  enum class Kind { kOverHardShare, kTookFromWaiting, kUngoverned, kNoSamples };
  Kind kind = Kind::kOverHardShare;
  std::string key;  // the tenant's; empty for kNoSamples
  std::string uuid;
  double used = 0;                 // of the window, on the SMs
  double allowed = 0;              // the share (kOverHardShare, kTookFromWaiting)
  std::string waiting;             // kTookFromWaiting: the key of a tenant that waited
  std::vector<unsigned int> pids;  // the processes concerned
  std::string detail;              // kNoSamples: why
  bool enforceable = true;         // the tier's onDrift may act on it (else: report)
  std::string Describe() const;    // one sentence for Events and logs
};
std::string_view Name(ComputeFinding::Kind kind);

class ComputeDrift {
 public:
  explicit ComputeDrift(ComputeDriftOptions options = {}) : options_(options) {}

  // One evaluation at `now_us` (the samples' clock): `tenants` on every GPU checked, the new
  // samples of each GPU (absent: none read this time; `errors` names GPUs whose samples could
  // not be read). Returns the episodes that begin now.
  std::vector<ComputeFinding> Evaluate(
      std::uint64_t now_us, const std::vector<ComputeTenant>& tenants,
      const std::map<std::string, std::vector<UtilizationSample>>& samples,
      const std::map<std::string, std::string>& errors = {});

  // The newest sample stamp seen on `uuid` (what to read samples after; 0: none yet).
  std::uint64_t LastSeen(const std::string& uuid) const;
  // A tenant's use of the SMs over the window ending at the latest evaluation (tests, metrics).
  double Used(const std::string& key) const;
  // Episodes in progress (tests).
  bool Flagged(const std::string& key, ComputeFinding::Kind kind) const;

 private:
  struct Busy {
    std::uint64_t from_us = 0;  // the span the sample covers, (from_us, at_us]
    std::uint64_t at_us = 0;
    std::uint64_t busy_us = 0;
    bool ungoverned = false;
    unsigned int pid = 0;
  };
  struct TenantState {
    std::deque<Busy> busy;                                       // within the window
    std::deque<std::pair<std::uint64_t, std::uint64_t>> waited;  // (at_us, waited_ns)
    double used = 0, used_ungoverned = 0;
  };
  void Trim(TenantState& t, std::uint64_t now_us) const;
  double WaitedFraction(const TenantState& t) const;
  // Adds one GPU's new samples to its tenants' busy time.
  void Take(const std::string& uuid, const std::vector<UtilizationSample>& list,
            const std::map<std::pair<std::string, unsigned int>, const ComputeTenant*>& owner);

  ComputeDriftOptions options_;
  std::uint64_t start_us_ = 0;      // samples stamped before the first evaluation do not count
  std::uint64_t last_eval_us_ = 0;  // (a clock stepped back starts the bookkeeping again)
  std::map<std::string, TenantState> tenants_;
  std::map<std::string, std::uint64_t> last_seen_;  // by uuid
  // Episodes in progress: (key|uuid, kind) -> when the condition last held.
  std::map<std::pair<std::string, ComputeFinding::Kind>, std::uint64_t> flagged_;
};

}  // namespace tessera::agent
