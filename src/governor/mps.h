// The MPS backend (ADR 0017): one MPS control daemon per GPU, started and supervised by
// tessera's node side in user space (the GPU's compute mode and settings are never changed).
// A container in mode `mps` gets the daemon's pipe folder and its allocation as MPS client
// environment: pinned device memory, active thread percentage and client priority. That
// environment is the tenant's to edit, so the preload library stays the authority on memory
// and keeps virtualizing totals (MPS reports the physical total).
//
// The MPS control daemon serves one user ID at a time (a second user's clients wait until the
// first user's are done), so co-tenants of one MPS GPU must share a UID: placement and admission
// enforce it (tessera.dev/mps-user); the node side refuses a client of another UID.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

#include "tessera/model.h"
#include "tessera/status.h"

namespace tessera::governor {

// Whether an MPS control daemon answers on `pipe_dir`: a process listens on its `control` socket
// (a leftover socket file of a daemon that died does not count).
bool DaemonAnswers(const std::string& pipe_dir);

// `program` if it is a path, else the first executable of that name in PATH; "" if none.
std::string FindInPath(const std::string& program);

// Spatial priority under MPS (ADR 0017): the SMs a client's context may use are fixed when the
// context is created (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE), so a latency-critical client beside a
// hog of long kernels finds SMs free at once instead of waiting for the hog's kernels to end.
//   latency-critical  no SM limit (its share, if any, is a time share: the arbiter's);
//   normal            its share as an SM limit (as before), or, with `normal_yields`, what a
//                     best-effort client gets;
//   best-effort       at most 100 - reserve, where reserve is the larger of `lc_reserve_percent`
//                     and the shares the latency-critical clients on the GPU ask for now; never
//                     below `min_sm_percent`.
// The limit is set whether or not a latency-critical client is there yet: a context's limit
// cannot change once it exists, so a best-effort client that started first must already leave
// the reserve. A latency-critical client that asks for more than the reserve left by clients
// already running gets the arbiter's priority holds on those clients instead.
inline constexpr std::uint32_t kMinSmPercent = kMpsMinSmPercent;
struct SpatialPolicy {
  std::uint32_t lc_reserve_percent = 20;
  std::uint32_t min_sm_percent = kMinSmPercent;
  bool normal_yields = false;
};
// The active thread percentage for a client (100: no limit). `lc_asks_percent`: the sum of the
// shares of the latency-critical clients on the GPU.
std::uint32_t ActiveThreadPercent(std::uint32_t cores_percent, PriorityClass priority,
                                  const SpatialPolicy& policy, std::uint32_t lc_asks_percent);
// Whether a client with that limit leaves latency-critical clients their reserve: the arbiter
// then does not hold it for priority (the SMs already protect them).
bool YieldsSms(PriorityClass priority, const SpatialPolicy& policy);
// The share a limits file's text gives a latency-critical MPS client on the GPU `uuid` (0 for any
// other file, or one that cannot be parsed): what the reserve of that GPU must leave it.
std::uint32_t LatencyCriticalMpsShare(std::string_view limits_text, std::string_view uuid);
// Refuses an SM limit below the floor: `cores_percent` (1-99) under mode mps is the client's SM
// limit. Names the field as `field`.
Status CheckSmFloor(std::uint32_t cores_percent, const std::string& field);

// The client environment for a container's allocation on the daemon at `pipe_dir`/`log_dir`
// (`log_dir` "": none; a node's containers do not get the daemon's logs).
// `memory_bytes` 0: no pinned limit; `thread_percent` 0 or 100: no SM limit
// (ActiveThreadPercent gives it).
std::vector<std::string> MpsClientEnvironment(const std::string& pipe_dir,
                                              const std::string& log_dir,
                                              std::uint64_t memory_bytes,
                                              std::uint32_t thread_percent, PriorityClass priority);

// Whether a client running as `uid` may join a GPU whose live MPS clients run as `live_uids`:
// FailedPrecondition naming both user IDs when they differ.
Status CheckMpsUser(uid_t uid, const std::vector<uid_t>& live_uids);

// The MPS control daemons of a node's GPUs, for containers (tessera-node): one per GPU under
// <dir>/<uuid>/{pipe,log}, started on first use, started again if it is gone, quit once no MPS
// container uses the GPU. The containers get the pipe folder mounted and the client environment;
// they must share the node's PID namespace (spec.hostPID; measured: a client in its own PID
// namespace cannot reach the daemon, its own IPC namespace is fine).
class NodeMps {
 public:
  struct Endpoint {
    std::string pipe_dir, log_dir;  // on the node
  };
  // The daemons outlive the agent (a restart must not end running containers).
  NodeMps(std::string dir, std::string control)
      : dir_(std::move(dir)), control_(std::move(control)) {}
  NodeMps(const NodeMps&) = delete;
  NodeMps& operator=(const NodeMps&) = delete;

  // The daemon of `uuid`, running, for a container of user `uid`: FailedPrecondition when the
  // GPU's MPS containers run as another user; NotFound without the control program.
  StatusOr<Endpoint> Ensure(const std::string& uuid, uid_t uid);
  // The GPUs that still have MPS containers: the daemons of the others are quit (not one that
  // Ensure started in the last minute: its container may not be recorded yet).
  void Retain(const std::vector<std::string>& in_use);

 private:
  std::mutex mu_;
  std::string dir_, control_;
  std::map<std::string, std::chrono::steady_clock::time_point> ensured_;
};

// The MPS daemon of one GPU on this machine, shared by every `tessera run --mode mps` there:
// the first one starts it, the last one out quits it. Registration lives in `dir` (one folder
// per GPU, beside the local compute arbiter's), serialized by a lock file.
class LocalMps {
 public:
  // `control`: the nvidia-cuda-mps-control binary (a path, or a name looked up in PATH).
  static StatusOr<std::unique_ptr<LocalMps>> Join(const std::string& dir, const std::string& uuid,
                                                  const std::string& control);
  ~LocalMps();
  LocalMps(const LocalMps&) = delete;
  LocalMps& operator=(const LocalMps&) = delete;

  const std::string& pipe_dir() const { return pipe_dir_; }
  const std::string& log_dir() const { return log_dir_; }
  bool started_daemon() const { return started_; }

 private:
  LocalMps() = default;
  std::string dir_, uuid_, control_, pipe_dir_, log_dir_, client_file_;
  bool started_ = false;
};

}  // namespace tessera::governor
