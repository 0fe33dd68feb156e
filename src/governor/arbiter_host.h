// The node side of the compute governor: one Arbiter per GPU, fed every tick from the shared
// regions of the containers on it, its verdicts written back into those regions (Compute::gate,
// depth_us, arbiter_beat_ns). tessera-node hosts one for its GPUs; `tessera run` hosts one
// through LocalArbiter, which lets every `tessera run` of a machine share it.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tessera/limits.h"
#include "tessera/region.h"
#include "tessera/status.h"

#include "governor/arbiter.h"
#include "governor/mps.h"

namespace tessera::governor {

// One container on one GPU. The tenant comes from the container's read-only limits file,
// never from its region (which the tenant can write).
struct Member {
  std::string key;  // stable while the container lives (e.g. its region path + GPU)
  std::string region_path;
  std::string uuid;  // the GPU
  Tenant tenant;
};

// The members a limits file describes (one per device line), for the region at `region_path`.
// `spatial`: which MPS clients leave latency-critical ones their SMs (Tenant::yields_sms).
std::vector<Member> MembersOf(const Limits& limits, const std::string& region_path,
                              const SpatialPolicy& spatial = {});

struct ArbiterHostOptions {
  std::uint64_t tick_ns = 200'000;          // while some container on a GPU is governed
  std::uint64_t idle_tick_ns = 10'000'000;  // while every launch runs free (no thread wakes 5,000
                                            // times a second for nothing)
  ArbiterOptions arbiter;
};

class ArbiterHost {
 public:
  explicit ArbiterHost(ArbiterHostOptions options = {}) : options_(options) {}
  ~ArbiterHost();  // stops the thread; every member's gate goes back to kFree
  ArbiterHost(const ArbiterHost&) = delete;
  ArbiterHost& operator=(const ArbiterHost&) = delete;

  // Replaces the member list: newcomers are attached (a region that cannot be attached is
  // skipped and named in the returned error; the others still apply), leavers are released.
  Status SetMembers(const std::vector<Member>& members);
  // One decision for every GPU at `now_ns` (CLOCK_MONOTONIC; the thread calls it every tick).
  // Returns whether any GPU's arbiter is governing.
  bool Tick(std::uint64_t now_ns);
  void Start();
  void Stop();

  // For `tessera top` and tests: a member's latest verdict.
  Verdict VerdictFor(const std::string& key) const;

 private:
  struct Joined {
    Member member;
    shm::Mapping mapping;
    std::uint64_t inode = 0;  // of the region file attached: a re-created region is attached anew
    int device = -1;          // index in the region
    int id = 0;               // in its GPU's arbiter
    bool broken = false;      // its file was truncated under the mapping (SIGBUS caught): let go
  };
  void Release(Joined& j);

  ArbiterHostOptions options_;
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Joined>> joined_;  // by key
  std::map<std::string, Arbiter> arbiters_;                // by GPU UUID
  int next_id_ = 1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// `tessera run`'s side: the containers of one machine register in a folder per GPU
// (<dir>/<uuid>/member-<pid>, naming their limits file and region); whichever `tessera run`
// holds <dir>/<uuid>/arbiter.lock hosts the arbiter for everyone, and another takes over
// when it exits.
class LocalArbiter {
 public:
  // `dir`: the machine-wide folder (DefaultLocalArbiterDir()).
  static StatusOr<std::unique_ptr<LocalArbiter>> Register(const std::string& dir,
                                                          const std::string& limits_path,
                                                          const std::string& region_path,
                                                          const std::vector<std::string>& uuids);
  ~LocalArbiter();  // unregisters; stops hosting

 private:
  LocalArbiter() = default;
  void Run();
  std::vector<Member> ScanMembers();

  std::string dir_;
  std::vector<std::string> uuids_;
  std::vector<std::string> files_;  // our member files
  std::vector<int> lock_fds_;       // per GPU, -1 until we host it
  ArbiterHost host_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// A registration file's (limits file, region) paths; empty where it names none.
std::pair<std::string, std::string> ReadRegistration(const std::string& member_file);
// The (limits file, region) of every live `tessera run` registered under `dir`, over all GPUs,
// each once (a run on two GPUs registers under both): for `tessera top`.
std::vector<std::pair<std::string, std::string>> LocalRegistrations(const std::string& dir);

// The sum of the shares of the latency-critical MPS clients registered under `dir` for the GPU
// `uuid` (live `tessera run`s only), at most 100: what a best-effort MPS client leaves them.
std::uint32_t LatencyCriticalMpsAsks(const std::string& dir, const std::string& uuid);

// <temp>/tessera-gpu: shared by every user of the machine (mode 1777), so that containers of
// different users still meet one arbiter per GPU.
std::string DefaultLocalArbiterDir();

}  // namespace tessera::governor
