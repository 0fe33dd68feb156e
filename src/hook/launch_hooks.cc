// The compute governor's half in the container (ADR 0017): every launch path (kernels, Ex,
// cooperative, graphs; the runtime reaches the same entry points through cuGetProcAddress)
// goes through Governed(). While the container's gate is kFree — no arbiter, or nothing to
// govern — that is one relaxed load per device and the real call. Otherwise a launch
//   1. waits while the arbiter holds the gate (counting throttled / priority-held time),
//   2. waits while the work this process has in flight exceeds the arbiter's depth,
//   3. is fenced with events (governor::FenceTracker) so that a watcher thread can add the GPU
//      time it really took to the region's busy_ns, and stamp the container active while work
//      is in flight.
// Launches into a stream being captured are not launches (they become graph nodes) and pass.
// Any failure of this machinery lets the launch through and is counted (fail-open).
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <dlfcn.h>
#include <mutex>
#include <pthread.h>
#include <string>
#include <string_view>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include <vector>

#include "tessera/log.h"
#include "tessera/names.h"
#include "tessera/quantity.h"

#include "governor/busy_log.h"
#include "governor/fences.h"
#include "hook/intercept.h"
#include "hook/monotonic_condition.h"
#include "hook/process_state.h"

namespace tessera::hook {
namespace {

constexpr std::uint64_t kDefaultDepthNs = 2'000'000;
constexpr std::uint64_t kStaleArbiterNs = 200'000'000;  // the arbiter's beat is this old: fail-open
constexpr std::uint64_t kGatePollNs = 50'000;
constexpr std::uint64_t kWatchPollNs = 500'000;
constexpr std::uint64_t kWatchPollWaitedNs = 100'000;  // while a launch waits for the depth
constexpr std::uint64_t kIdleFenceNs = 1'000'000;  // an open segment with no launch for this long
// A launch writes the region's activity stamp only when the stamp is this old (the watcher writes
// the latest launch's moment at every poll): the arbiter reads it at 250 us and 1 ms scales, and
// the stamp's cache line is shared by every process of the container (two launch-bound processes
// writing it at every launch bounced it between their cores; what that cost them on the H200 is
// not settled: docs/benchmarks.md, session 22).
constexpr std::uint64_t kActiveStampNs = 50'000;
constexpr std::uint64_t kMaxDepthWaitNs = 20'000'000;  // at least; see the depth wait
// How often the watcher re-times its epoch against the host clock (the GPU's timer and the
// host's drift apart by parts per million; cuEventElapsedTime is a float of milliseconds).
constexpr std::uint64_t kEpochPeriodNs = 1'000'000'000;
// What a probe's span holds beyond its kernel (FenceTracker::SetProbeOffsetNs): its two events'
// own processing, timed at run time as an empty bracket behind the gate (this value until then,
// or without a gate), and the launch's setup on the GPU (TESSERA_PROBE_SETUP_NS). On the H200
// (driver 580.159.04, test/gpu/probe_offset.py) an empty gated bracket took 1.25 us and a
// bracket exceeded the kernel's CUPTI record by 2.27-2.45 us for kernels of 1 to 120 us.
constexpr std::uint64_t kDefaultEmptyBracketNs = 1'250;
constexpr std::uint64_t kDefaultProbeSetupNs = 1'050;
constexpr std::uint64_t kMaxProbeSetupNs = 1'000'000;
// The probes' controls (governor::FenceTracker, fences.h): an empty kernel of ours, as PTX the
// driver compiles at load (no nvcc, every generation since Volta), and its own GPU time by a
// kernel trace (TESSERA_PROBE_CONTROL_NS; the H200's: test/gpu/probe_offset.py).
constexpr char kControlPtx[] = R"PTX(
.version 7.0
.target sm_70
.address_size 64
.visible .entry tessera_control()
{
  ret;
}
)PTX";
constexpr std::uint64_t kDefaultControlKernelNs = 576;

void SleepNs(std::uint64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1'000'000'000ULL), static_cast<long>(ns % 1'000'000'000ULL)};
  nanosleep(&ts, nullptr);
}

// A detached thread running fn(arg); false if none could be made (e.g. the pod's pids limit).
bool StartDetached(void* (*fn)(void*), void* arg) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t thread;
  const int rc = pthread_create(&thread, &attr, fn, arg);
  pthread_attr_destroy(&attr);
  return rc == 0;
}

// The calling thread's stream-capture mode is relaxed for the scope, so that our event queries
// and records never invalidate a capture another thread runs in global mode.
class RelaxedCapture {
 public:
  RelaxedCapture() : exchange_(Real<CudaHook::cuThreadExchangeStreamCaptureMode>()) {
    if (exchange_ != nullptr && exchange_(&mode_) != CUDA_SUCCESS) exchange_ = nullptr;
  }
  ~RelaxedCapture() {
    if (exchange_ != nullptr) exchange_(&mode_);
  }
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  decltype(Real<CudaHook::cuThreadExchangeStreamCaptureMode>()) exchange_;
  CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
};

// The driver's events, each call in relaxed capture mode (RelaxedCapture): the launch path makes
// these calls only at segment boundaries and probes, so ordinary launches pay for none of it.
class CudaEvents final : public governor::EventApi {
 public:
  void* Create() override {
    const RelaxedCapture relaxed;
    CUevent e = nullptr;
    const auto create = Real<CudaHook::cuEventCreate>();
    return create != nullptr && create(&e, CU_EVENT_DEFAULT) == CUDA_SUCCESS ? e : nullptr;
  }
  void Destroy(void* event) override {
    if (const auto destroy = Real<CudaHook::cuEventDestroy_v2>())
      destroy(static_cast<CUevent>(event));
  }
  bool Record(void* event, void* stream) override {
    const RelaxedCapture relaxed;
    const auto record = Real<CudaHook::cuEventRecord>();
    return record != nullptr &&
           record(static_cast<CUevent>(event), static_cast<CUstream>(stream)) == CUDA_SUCCESS;
  }
  State Query(void* event) override {
    const RelaxedCapture relaxed;
    const auto query = Real<CudaHook::cuEventQuery>();
    if (query == nullptr) return State::kError;
    const CUresult r = query(static_cast<CUevent>(event));
    return r == CUDA_SUCCESS           ? State::kDone
           : r == CUDA_ERROR_NOT_READY ? State::kPending
                                       : State::kError;
  }
  bool ElapsedNs(void* from, void* to, std::uint64_t* ns) override {
    auto elapsed = Real<CudaHook::cuEventElapsedTime>();
    if (elapsed == nullptr) elapsed = Real<CudaHook::cuEventElapsedTime_v2>();
    float ms = 0;
    if (elapsed == nullptr ||
        elapsed(&ms, static_cast<CUevent>(from), static_cast<CUevent>(to)) != CUDA_SUCCESS ||
        ms < 0) {
      return false;
    }
    *ns = static_cast<std::uint64_t>(static_cast<double>(ms) * 1e6);
    return true;
  }
  // The probe's gate (off with TESSERA_PROBE_GATE=0): the stream waits (cuStreamWaitValue32, GEQ)
  // on a word of pinned host memory that Release then writes. Driver functions outside the hook
  // table, resolved once; unavailable (an old driver, stream memory operations off) means probes
  // without a gate.
  bool Hold(void* stream) override {
    const RelaxedCapture relaxed;
    if (!gate_tried_) PrepareGate();
    if (wait_ == nullptr || GateResting() || loading_.load(std::memory_order_relaxed)) return false;
    const std::uint32_t next = gate_seq_.load(std::memory_order_relaxed) + 1;
    if (wait_(static_cast<CUstream>(stream), gate_device_, next, CU_STREAM_WAIT_VALUE_GEQ) !=
        CUDA_SUCCESS) {
      wait_ = nullptr;  // refused here (unsupported, or a capture began): no gate from now on
      gate_state_ = "off: a stream wait was refused";
      CountMachineryError("a probe's stream wait was refused; probes run without a gate");
      return false;
    }
    gate_seq_.store(next, std::memory_order_relaxed);
    hold_since_ns_.store(NowNs(), std::memory_order_release);
    return true;
  }
  // false when the watchdog had opened the gate already (it clears the stamp first).
  bool Release() override {
    const bool intact = hold_since_ns_.exchange(0, std::memory_order_acq_rel) != 0;
    __atomic_store_n(gate_host_, gate_seq_.load(std::memory_order_relaxed), __ATOMIC_RELEASE);
    return intact;
  }
  bool CanHold() override {
    return !loading_.load(std::memory_order_relaxed) &&
           (!gate_tried_ || (wait_ != nullptr && !GateResting()));
  }
  // While the watcher loads the control kernel (KeepControl), no stream is held.
  void SetLoading(bool loading) { loading_.store(loading, std::memory_order_relaxed); }
  // The empty kernel of the calling thread's current context, once the watcher has loaded and
  // run it there (AddControl; a first launch may load its module, which must never happen on a
  // held stream). Called under the governor's mutex, as AddControl is.
  bool LaunchControl(void* stream) override {
    const auto current = Real<CudaHook::cuCtxGetCurrent>();
    const auto launch = Real<CudaHook::cuLaunchKernel>();
    CUcontext context = nullptr;
    if (controls_ == 0 || current == nullptr || launch == nullptr ||
        current(&context) != CUDA_SUCCESS) {
      return false;
    }
    for (std::size_t i = 0; i < controls_; ++i) {
      if (control_[i].first != context) continue;
      const RelaxedCapture relaxed;
      return launch(control_[i].second, 1, 1, 1, 32, 1, 1, 0, static_cast<CUstream>(stream),
                    nullptr, nullptr) == CUDA_SUCCESS;
    }
    return false;
  }
  void AddControl(CUcontext context, CUfunction function) {
    if (controls_ < control_.size()) control_[controls_++] = {context, function};
  }

 private:
  using HostAllocFn = CUresult (*)(void**, std::size_t, unsigned int);
  using DevicePointerFn = CUresult (*)(CUdeviceptr*, void*, unsigned int);
  using WaitValueFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
  void PrepareGate() {
    gate_tried_ = true;
    // On unless TESSERA_PROBE_GATE=0. Without it a probe of an idle stream counts its launch's
    // submission and is corrected from host times only (fences.h); a launch that blocks while
    // the stream is held is let through by the watchdog below.
    const char* knob = std::getenv(std::string(names::kEnvProbeGate).c_str());
    gate_state_ = "off: TESSERA_PROBE_GATE=0";
    if (knob != nullptr && knob[0] == '0') return;
    // Every launch waits for its kernel: with the stream held it would never return.
    const char* blocking = std::getenv("CUDA_LAUNCH_BLOCKING");
    gate_state_ = "off: CUDA_LAUNCH_BLOCKING=1";
    if (blocking != nullptr && blocking[0] == '1') return;
    const DlsymFn lookup = RealDlsym();
    void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    gate_state_ = "off: libcuda.so.1 not loaded";
    if (lookup == nullptr || cuda == nullptr) return;
    gate_state_ = "off: no pinned word (cuMemHostAlloc, cuStreamWaitValue32)";
    const auto host_alloc = reinterpret_cast<HostAllocFn>(lookup(cuda, "cuMemHostAlloc"));
    const auto device_pointer =
        reinterpret_cast<DevicePointerFn>(lookup(cuda, "cuMemHostGetDevicePointer_v2"));
    auto wait = reinterpret_cast<WaitValueFn>(lookup(cuda, "cuStreamWaitValue32_v2"));
    if (wait == nullptr) wait = reinterpret_cast<WaitValueFn>(lookup(cuda, "cuStreamWaitValue32"));
    void* word = nullptr;
    if (host_alloc == nullptr || device_pointer == nullptr || wait == nullptr ||
        host_alloc(&word, 64, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP) !=
            CUDA_SUCCESS ||
        device_pointer(&gate_device_, word, 0) != CUDA_SUCCESS) {
      return;  // (a pinned word allocated without a device pointer is left: 64 bytes, once)
    }
    gate_host_ = static_cast<std::uint32_t*>(word);
    *gate_host_ = 0;
    gate_state_ = "off: no watchdog thread";
    if (StartGateWatchdog()) {
      wait_ = wait;
      gate_state_ = "on";
    }
  }

 public:
  // For TESSERA_HOOK_STATS: whether probes are held at the gate, and if not why.
  const char* gate_state() const {
    if (trips_.load() >= kMaxGateTrips) return "off: held past the watchdog's 5 ms too often";
    return trips_.load() > 0 ? "on (after the watchdog opened it at least once)" : gate_state_;
  }

 private:
  // Opens a gate held for over kGateWatchdogNs without taking any lock (the launch path holds
  // its mutex across the real launch, and a launch that blocks while its stream is held — a
  // module loaded with a context synchronize, CUDA_LAUNCH_BLOCKING, a full queue — would never
  // return); the gate then rests for kGateRestNs, and after kMaxGateTrips trips, each within
  // kTripMemoryNs of the one before, it is off for good. (On the H200 a CuPy loop flooding a
  // stream of its own tripped it about once in 5 s: a count that never forgets would turn the
  // gate off for good within a minute, and a gate off for good left that loop's probes inexact,
  // its kernels charged nothing.)
  static constexpr std::uint64_t kGateWatchdogNs = 5'000'000;
  static constexpr std::uint64_t kGateRestNs = 100'000'000;
  static constexpr std::uint32_t kMaxGateTrips = 8;
  static constexpr std::uint64_t kTripMemoryNs = 60'000'000'000;
  bool GateResting() const {
    return trips_.load(std::memory_order_relaxed) >= kMaxGateTrips ||
           NowNs() < rest_until_ns_.load(std::memory_order_relaxed);
  }
  bool StartGateWatchdog() {
    return StartDetached(
        [](void* self) -> void* {
          auto* events = static_cast<CudaEvents*>(self);
          // After the last trip no Hold is placed any more (GateResting); one that passed that
          // check just before is still watched for a second.
          for (int after_last = 0; after_last < 1000;) {
            SleepNs(1'000'000);
            if (events->trips_.load(std::memory_order_relaxed) >= kMaxGateTrips) ++after_last;
            std::uint64_t since = events->hold_since_ns_.load(std::memory_order_acquire);
            const std::uint64_t now = NowNs();
            if (since == 0 || now <= since + kGateWatchdogNs) continue;
            events->rest_until_ns_.store(now + kGateRestNs);
            // Only the hold that was found stale (a Release, and the next Hold's own stamp, must
            // not be undone), opened without clearing anyone else's stamp.
            if (!events->hold_since_ns_.compare_exchange_strong(since, 0)) continue;
            __atomic_store_n(events->gate_host_, events->gate_seq_.load(), __ATOMIC_RELEASE);
            // (only this thread writes trips_ and last_trip_ns_)
            if (now > events->last_trip_ns_ + kTripMemoryNs) events->trips_.store(0);
            events->last_trip_ns_ = now;
            const std::uint32_t trips = events->trips_.fetch_add(1) + 1;
            CountMachineryError(trips < kMaxGateTrips
                                    ? "a probe's gate stayed closed for 5 ms (a launch blocked "
                                      "behind it); probes run without a gate for 100 ms"
                                    : "a probe's gate stayed closed for 5 ms, 8 times; probes "
                                      "run without a gate from now on");
          }
          return nullptr;
        },
        this);
  }

  bool gate_tried_ = false;
  const char* gate_state_ = "not used";
  WaitValueFn wait_ = nullptr;
  std::uint32_t* gate_host_ = nullptr;
  CUdeviceptr gate_device_ = 0;
  std::atomic<std::uint32_t> gate_seq_{0};
  std::atomic<std::uint64_t> hold_since_ns_{0};
  std::atomic<std::uint32_t> trips_{0};          // the watchdog opened the gate this often, lately
  std::uint64_t last_trip_ns_ = 0;               // (the watchdog's own)
  std::atomic<std::uint64_t> rest_until_ns_{0};  // no Hold before this (after a trip)
  std::array<std::pair<CUcontext, CUfunction>, shm::kMaxDevices> control_{};
  std::size_t controls_ = 0;
  std::atomic<bool> loading_{false};
};

std::uint64_t RandomSeed() {
  std::uint64_t seed = 0;
  if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) != static_cast<ssize_t>(sizeof(seed)))
    seed = NowNs() ^ (static_cast<std::uint64_t>(getpid()) << 32);
  return seed | 1;
}

struct DeviceGovernor {
  // Every thread's per-thread stream has one key: its segments complete out of order.
  // The probes' and controls' random choices are seeded per process: a program that knew the
  // sequence could tell which of its launches will be probed, and which held probe a control.
  explicit DeviceGovernor(governor::EventApi* api)
      : tracker(api,
                governor::FenceOptions{.seed = RandomSeed(),
                                       .shared_key = static_cast<void*>(CU_STREAM_PER_THREAD)}) {}
  governor::FenceTracker tracker;
  CUcontext context = nullptr;      // the watcher makes it current to query this device's events
  CUstream epoch_stream = nullptr;  // the watcher's own, for the epoch event
  std::uint64_t epoch_at_ns = 0;    // when the epoch was last timed (or tried)
  governor::Measured measured;      // reused by each pass
  governor::FenceTracker::PollBatch batch;
  std::uint64_t errors_counted = 0;
  void* bracket[2] = {};                 // an empty bracket behind the gate (KeepProbeOffset)
  std::uint64_t empty_brackets[8] = {};  // its latest timings (0: none yet)
  std::uint32_t empty_next = 0;
  bool control_tried = false;  // the probes' control kernel (KeepControl)
  // What the launches tell the region, kept here and written by the watcher (PublishLaunches):
  // the region's Compute counters are one cache line that every process of the container would
  // otherwise write at every launch.
  std::uint64_t launches_unpublished = 0;
  std::uint64_t last_launch_ns = 0;
  std::uint64_t active_stamped_ns = 0;  // the latest launch moment written to the region
};

// Per-process state. Leaked on purpose (hooks may run while the process exits); a fork child
// starts a fresh one (the parent's watcher thread does not exist there).
struct Governor {
  std::mutex mu;
  MonotonicCondition completed;  // the watcher polled: depth waiters re-check
  MonotonicCondition work;       // a launch added work: the watcher wakes
  CudaEvents events;
  DeviceGovernor* devices[shm::kMaxDevices] = {};
  std::atomic<bool> watcher_started{false};  // read unlocked by FenceBeforeWait
  bool disabled = false;      // no watcher thread could be started: launches run ungoverned
  bool watcher_idle = false;  // waiting for work: the next launch wakes it
  int depth_waiters = 0;      // launches waiting for the depth: the watcher polls faster
};

// TESSERA_HOOK_STATS=1: where the governed launch path spends its time (printed at exit with the
// call counts), to keep its cost visible on real workloads.
struct GovernorStats {
  std::atomic<std::uint64_t> launches{0}, total_ns{0}, real_ns{0}, gate_ns{0}, depth_ns{0},
      capture_ns{0}, lock_ns{0}, fences_ns{0};
  // Fenced waits (synchronizes): the fences before, the real wait, the completion marks after.
  std::atomic<std::uint64_t> waits{0}, wait_fences_ns{0}, wait_real_ns{0}, wait_after_ns{0};
  // The watcher's polls of work in flight (the mutex held but for its driver calls).
  std::atomic<std::uint64_t> polls{0}, poll_ns{0};
};
GovernorStats g_governor_stats;
Governor* g_governor = new Governor();

shm::Gate GateOf(const shm::Compute& c) {
  return static_cast<shm::Gate>(c.gate.load(std::memory_order_acquire));
}

bool Stale(const shm::Compute& c, std::uint64_t now) {
  const std::uint64_t beat = c.arbiter_beat_ns.load(std::memory_order_relaxed);
  return beat == 0 || now > beat + kStaleArbiterNs;
}

// Stream captures that began in this process and have not ended: raised before the driver's
// begin (so no launch can miss a capture that began), lowered once the stream has left capture.
// While it is 0 no stream can be capturing and a governed launch asks the driver nothing; a
// capture entry point this library does not intercept (handed out by cuGetProcAddress or dlsym:
// a newer version) sets g_captures_untracked for good, and every governed launch asks again.
std::atomic<std::uint32_t> g_captures{0};
std::atomic<bool> g_captures_untracked{false};

CUresult CaptureStatus(CUstream stream, bool per_thread, CUstreamCaptureStatus* status) {
  const auto is_capturing = per_thread ? Real<CudaHook::cuStreamIsCapturing_ptsz>()
                                       : Real<CudaHook::cuStreamIsCapturing>();
  *status = CU_STREAM_CAPTURE_STATUS_NONE;
  return is_capturing != nullptr ? is_capturing(stream, status) : CUDA_ERROR_NOT_FOUND;
}

// Whether `stream` is being captured into a graph. When the driver cannot say — e.g.
// CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: the legacy stream while another stream of the context is
// captured — it counts as captured: nothing of ours may go into it.
bool Capturing(CUstream stream, bool per_thread) {
  if (g_captures.load(std::memory_order_acquire) == 0 &&
      !g_captures_untracked.load(std::memory_order_relaxed)) {
    return false;
  }
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUresult r = CaptureStatus(stream, per_thread, &status);
  if (r == CUDA_ERROR_NOT_FOUND) return false;
  return r != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE;
}

// Whether a fence may be recorded on `stream` by the calling thread (CU_STREAM_PER_THREAD names
// the caller's own per-thread stream).
bool MayRecordFromCaller(void* stream) { return !Capturing(static_cast<CUstream>(stream), false); }

// The stream a fence must be recorded on: a per-thread launch on the default stream means the
// calling thread's stream, which the legacy cuEventRecord names CU_STREAM_PER_THREAD.
void* StreamKey(CUstream stream, bool per_thread) {
  return per_thread && stream == nullptr ? static_cast<void*>(CU_STREAM_PER_THREAD)
                                         : static_cast<void*>(stream);
}

// A nanosecond knob of the preload library, from the container's environment: the tenant's, so
// it may only move the charge up (ADR 0017): values outside [least, most] are refused with the
// accepted form and `fallback` is used.
std::uint64_t BoundedEnvNs(std::string_view name, std::uint64_t fallback, std::uint64_t least,
                           std::uint64_t most) {
  const char* value = std::getenv(std::string(name).c_str());
  if (value == nullptr || *value == '\0') return fallback;
  if (const StatusOr<std::uint64_t> ns = ParseUnsigned(value, most); ns.ok() && *ns >= least)
    return *ns;
  TESSERA_LOG(kWarn, kHook, "%s=%s: expected whole nanoseconds from %llu to %llu; using %llu",
              std::string(name).c_str(), value, static_cast<unsigned long long>(least),
              static_cast<unsigned long long>(most), static_cast<unsigned long long>(fallback));
  return fallback;
}

// TESSERA_PROBE_SETUP_NS: a larger setup would charge less, so at most the H200's.
std::uint64_t ProbeSetupNs() {
  static const std::uint64_t setup =
      BoundedEnvNs(names::kEnvProbeSetupNs, kDefaultProbeSetupNs, 0, kDefaultProbeSetupNs);
  return setup;
}

// Times an empty bracket behind the gate on the watcher's stream (with the epoch, once a second)
// and sets the probes' offset from the least of the latest eight (governor::EmptyBracketNs).
void KeepProbeOffset(DeviceGovernor& d, std::unique_lock<std::mutex>& lock) {
  governor::EventApi& api = *d.tracker.api();
  if (d.bracket[0] == nullptr) d.bracket[0] = api.Create();
  if (d.bracket[1] == nullptr) d.bracket[1] = api.Create();
  if (d.bracket[0] == nullptr || d.bracket[1] == nullptr || !api.Hold(d.epoch_stream)) return;
  const bool recorded =
      api.Record(d.bracket[0], d.epoch_stream) && api.Record(d.bracket[1], d.epoch_stream);
  api.Release();
  if (!recorded) return;
  lock.unlock();
  const std::uint64_t start = NowNs();
  governor::EventApi::State state = api.Query(d.bracket[1]);
  while (state == governor::EventApi::State::kPending && NowNs() - start < kGatePollNs * 200) {
    state = api.Query(d.bracket[1]);
  }
  std::uint64_t ns = 0;
  const bool timed = state == governor::EventApi::State::kDone &&
                     api.ElapsedNs(d.bracket[0], d.bracket[1], &ns) && ns > 0;
  lock.lock();
  if (!timed) return;
  d.empty_brackets[d.empty_next++ % std::size(d.empty_brackets)] = ns;
  d.tracker.SetProbeOffsetNs(governor::EmptyBracketNs(d.empty_brackets, kDefaultEmptyBracketNs) +
                             ProbeSetupNs());
}

// TESSERA_PROBE_CONTROL_NS: the control kernel's own GPU time (a smaller one would charge less,
// so at least the H200's). No value turns the controls off: the environment is the tenant's, and
// the empty bracket's offset can be the smaller one.
std::uint64_t ControlKernelNs() {
  static const std::uint64_t ns = BoundedEnvNs(names::kEnvProbeControlNs, kDefaultControlKernelNs,
                                               kDefaultControlKernelNs, kMaxProbeSetupNs);
  return ns;
}

// Loads the probes' control kernel into the device's context and runs it once on the watcher's
// stream (the watcher, its context current), so that its module is loaded before any probe
// launches it behind a gate; without the governor's mutex (`lock`), as loading a module may wait
// for the context's streams. Once per device: a driver that cannot compile the PTX leaves the
// probes' offset to the empty bracket and TESSERA_PROBE_SETUP_NS.
void KeepControl(Governor& g, DeviceGovernor& d, std::unique_lock<std::mutex>& lock) {
  if (d.control_tried || d.epoch_stream == nullptr || d.context == nullptr) return;
  d.control_tried = true;
  const auto load = Real<CudaHook::cuModuleLoadData>();
  const auto get = Real<CudaHook::cuModuleGetFunction>();
  const auto launch = Real<CudaHook::cuLaunchKernel>();
  const auto sync = Real<CudaHook::cuStreamSynchronize>();
  if (load == nullptr || get == nullptr || launch == nullptr || sync == nullptr) return;
  g.events.SetLoading(true);  // no Hold meanwhile: the load may wait for the context's streams
  lock.unlock();
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  const bool loaded = load(&module, kControlPtx) == CUDA_SUCCESS;
  const bool ready =
      loaded && get(&function, module, "tessera_control") == CUDA_SUCCESS &&
      launch(function, 1, 1, 1, 32, 1, 1, 0, d.epoch_stream, nullptr, nullptr) == CUDA_SUCCESS &&
      sync(d.epoch_stream) == CUDA_SUCCESS;
  if (loaded && !ready) {
    if (const auto unload = Real<CudaHook::cuModuleUnload>()) unload(module);
  }
  lock.lock();
  g.events.SetLoading(false);
  if (!ready) {
    TESSERA_LOG(kInfo, kHook,
                "the probes' control kernel could not be loaded; their offset "
                "stays the empty bracket and %s",
                std::string(names::kEnvProbeSetupNs).c_str());
    return;
  }
  d.tracker.SetControlKernelNs(ControlKernelNs());
  g.events.AddControl(d.context, function);
}

// Times the device's epoch against the host clock when it is due (the watcher, its context
// current): what lets the container's streams and processes count overlapping work once. The
// wait for the GPU runs without the governor's mutex (`lock`), so launches do not wait for it.
void KeepEpoch(DeviceGovernor& d, std::uint64_t now, std::unique_lock<std::mutex>& lock) {
  if (d.tracker.HasEpoch() && now < d.epoch_at_ns + kEpochPeriodNs) return;
  if (!d.tracker.HasEpoch() && d.epoch_at_ns != 0 && now < d.epoch_at_ns + kEpochPeriodNs / 10)
    return;
  d.epoch_at_ns = now;
  if (d.epoch_stream == nullptr) {
    const auto create = Real<CudaHook::cuStreamCreate>();
    if (create == nullptr || create(&d.epoch_stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
      d.epoch_stream = nullptr;
      return;
    }
  }
  governor::FenceTracker::EpochTiming timing;
  if (!d.tracker.PrepareEpoch(&timing)) return;
  lock.unlock();
  governor::FenceTracker::TimeEpoch(d.tracker.api(), d.epoch_stream, NowNs, 50'000, &timing);
  lock.lock();
  d.tracker.InstallEpoch(timing);
  KeepProbeOffset(d, lock);
}

// Writes what the launches since the last call told (their count, the latest one's moment) to the
// region. Under the governor's mutex.
void PublishLaunches(DeviceGovernor& d, shm::Compute& c) {
  if (d.launches_unpublished != 0) {
    c.launches.fetch_add(d.launches_unpublished, std::memory_order_relaxed);
    d.launches_unpublished = 0;
  }
  if (d.last_launch_ns > d.active_stamped_ns) {
    c.active_ns.store(d.last_launch_ns, std::memory_order_relaxed);
    d.active_stamped_ns = d.last_launch_ns;
  }
}

// Adds the watcher's findings to the region — the part of the measured spans that no other
// stream or process of the container had covered — and counts the tracker's new failures. The
// driver calls (event queries, elapsed times) run without the governor's mutex.
void Publish(DeviceGovernor& d, shm::Compute& c, shm::BusyLog& log, std::uint64_t now,
             std::unique_lock<std::mutex>& lock) {
  d.measured.spans.clear();
  d.measured.unplaced_ns = 0;
  d.tracker.BeginPoll(&d.batch);
  if (!d.batch.items.empty()) {
    lock.unlock();
    governor::FenceTracker::QueryBatch(d.tracker.api(), &d.batch);
    lock.lock();
    d.tracker.EndPoll(d.batch, &d.measured);
  }
  if (d.tracker.HasFenced()) {
    c.active_ns.store(now, std::memory_order_relaxed);
    // PublishLaunches must not move the stamp back to the latest launch's moment.
    d.active_stamped_ns = std::max(d.active_stamped_ns, now);
  }
  if (d.tracker.errors() > d.errors_counted) {
    d.errors_counted = d.tracker.errors();
    CountMachineryError("a fence event could not be recorded or timed; that work went unmeasured");
  }
  if (d.measured.spans.empty() && d.measured.unplaced_ns == 0) return;
  // The busy log is shared with the container's other processes (a lock of its own): merged
  // without the governor's mutex, which launches take. d.measured is the watcher's alone. In
  // time order: the log keeps its newest 60 spans, and a span older than all of them counts
  // whole, so one stream's many laid pieces must not push out another's of the same moment.
  lock.unlock();
  // One stream's spans come in order already (a launch-bound loop lays one a launch).
  const auto by_begin = [](const governor::Span& a, const governor::Span& b) {
    return a.begin_ns < b.begin_ns;
  };
  if (!std::is_sorted(d.measured.spans.begin(), d.measured.spans.end(), by_begin)) {
    std::sort(d.measured.spans.begin(), d.measured.spans.end(), by_begin);
  }
  bool contended = false;
  const std::uint64_t busy =
      governor::AddSpans(log, d.measured.spans, &contended) + d.measured.unplaced_ns;
  if (contended) CountMachineryError("the busy log stayed locked; overlap went uncounted");
  if (busy != 0) c.busy_ns.fetch_add(busy, std::memory_order_relaxed);
  lock.lock();
}

// Whether the watcher thread may record a fence on an application stream: not on a per-thread
// default stream (that name means the watcher's own), not into a capture.
bool MayRecordFromWatcher(void* stream) {
  return stream != static_cast<void*>(CU_STREAM_PER_THREAD) &&
         !Capturing(static_cast<CUstream>(stream), false);
}

void* WatcherMain(Governor* g, shm::Region* region);

// The watcher thread, detached; false if it cannot be created (e.g. the pod's pids limit): the
// caller then lets launches run ungoverned rather than fail or crash.
bool StartWatcher(Governor& g, shm::Region* region) {
  struct Args {
    Governor* g;
    shm::Region* region;
  };
  auto* args = new Args{&g, region};
  const bool started = StartDetached(
      [](void* p) -> void* {
        const Args a = *static_cast<Args*>(p);
        delete static_cast<Args*>(p);
        return WatcherMain(a.g, a.region);
      },
      args);
  if (!started) delete args;
  return started;
}

void* WatcherMain(Governor* g, shm::Region* region) {
  // Capture-safe: this thread's queries must not invalidate another thread's stream capture.
  if (const auto exchange = Real<CudaHook::cuThreadExchangeStreamCaptureMode>()) {
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    exchange(&mode);
  }
  const auto set_current = Real<CudaHook::cuCtxSetCurrent>();
  std::unique_lock<std::mutex> lock(g->mu);
  for (;;) {
    bool any = false;
    const std::uint64_t poll_began = g_stats_enabled ? NowNs() : 0;
    for (std::uint32_t i = 0; i < shm::kMaxDevices; ++i) {
      DeviceGovernor* d = g->devices[i];
      if (d == nullptr || !d->tracker.HasWork()) continue;
      any = true;
      if (set_current != nullptr && d->context != nullptr) set_current(d->context);
      const std::uint64_t now = NowNs();
      // Work launched and then left without a synchronize: fence it so that it is measured
      // and the container does not look busy for ever.
      d->tracker.FenceIdle(now, kIdleFenceNs, MayRecordFromWatcher);
      KeepEpoch(*d, now, lock);
      KeepControl(*g, *d, lock);
      Publish(*d, region->compute[i], region->busy[i], now, lock);
      PublishLaunches(*d, region->compute[i]);
    }
    if (g_stats_enabled && any) {
      g_governor_stats.polls.fetch_add(1, std::memory_order_relaxed);
      g_governor_stats.poll_ns.fetch_add(NowNs() - poll_began, std::memory_order_relaxed);
    }
    g->completed.NotifyAll();
    if (!any) {
      g->watcher_idle = true;
      g->work.WaitFor(lock, std::chrono::milliseconds(20));
      g->watcher_idle = false;
    } else {
      g->work.WaitFor(
          lock, std::chrono::nanoseconds(g->depth_waiters > 0 ? kWatchPollWaitedNs : kWatchPollNs));
    }
  }
}

// The governor's arbiter stopped deciding under a launch: counted on the device, logged once. A
// fail-open container's launch then runs ungoverned (true); a fail-closed one's waits until the
// arbiter decides again (its share and priority keep holding), counting the wait, and is then
// governed as usual (false). A governor that cannot come back (no watcher thread) refuses a
// fail-closed container's launches instead (see Governed).
bool GovernorFailed(shm::Compute& c) {
  c.governor_failures.fetch_add(1, std::memory_order_relaxed);
  if (!S().fail_closed) {
    CountMachineryError("the GPU's arbiter stopped deciding; launches run ungoverned (fail-open)");
    return true;
  }
  CountMachineryError(
      "the GPU's arbiter stopped deciding; launches wait until it decides again (fail-closed)");
  std::uint64_t now = NowNs();
  while (Stale(c, now)) {
    c.waiting_ns.store(now, std::memory_order_relaxed);
    SleepNs(kGatePollNs);
    const std::uint64_t later = NowNs();
    c.governor_down_ns.fetch_add(later - now, std::memory_order_relaxed);
    now = later;
  }
  return false;
}

// Waits while the arbiter holds the gate; false if the launch should not be governed after all
// (the arbiter went away and the container fails open).
bool WaitAtGate(shm::Compute& c) {
  shm::Gate gate = GateOf(c);
  if (gate == shm::Gate::kOpen || gate == shm::Gate::kFree) return gate == shm::Gate::kOpen;
  std::uint64_t now = NowNs();
  bool counted_share = false, counted_priority = false;
  while (gate == shm::Gate::kHeldShare || gate == shm::Gate::kHeldPriority) {
    if (Stale(c, now)) {
      if (GovernorFailed(c)) return false;
      now = NowNs();
      gate = GateOf(c);
      continue;
    }
    const bool priority = gate == shm::Gate::kHeldPriority;
    bool& counted = priority ? counted_priority : counted_share;
    if (!counted) {
      (priority ? c.priority_holds : c.launches_held).fetch_add(1, std::memory_order_relaxed);
      counted = true;
    }
    c.waiting_ns.store(now, std::memory_order_relaxed);
    SleepNs(kGatePollNs);
    const std::uint64_t later = NowNs();
    (priority ? c.priority_held_ns : c.throttled_ns)
        .fetch_add(later - now, std::memory_order_relaxed);
    now = later;
    gate = GateOf(c);
  }
  return gate == shm::Gate::kOpen;
}

DeviceGovernor& DeviceFor(Governor& g, int index) {
  DeviceGovernor*& d = g.devices[index];
  if (d == nullptr) {
    d = new DeviceGovernor(&g.events);
    d->tracker.SetProbeOffsetNs(kDefaultEmptyBracketNs + ProbeSetupNs());
  }
  if (d->context == nullptr) {
    if (const auto get = Real<CudaHook::cuCtxGetCurrent>()) get(&d->context);
  }
  return *d;
}

template <typename Launch>
__attribute__((noinline)) CUresult Governed(shm::Region* region, CUstream stream, bool per_thread,
                                            std::uint64_t key, const Launch& launch) {
  Governor& g = *g_governor;
  const std::uint64_t entered = g_stats_enabled ? NowNs() : 0;
  std::uint64_t gate_ns = 0, depth_wait_ns = 0, capture_ns = 0, lock_ns = 0;
  const int region_device = RegionDeviceForLaunch();
  if (region_device < 0) return launch();
  shm::Compute& c = region->compute[region_device];
  if (GateOf(c) == shm::Gate::kFree) return launch();
  if (g.disabled) {  // no watcher thread could be started: nothing can measure this launch
    c.governor_failures.fetch_add(1, std::memory_order_relaxed);
    return S().fail_closed ? CUDA_ERROR_OPERATING_SYSTEM : launch();
  }
  const std::uint64_t at_capture = g_stats_enabled ? NowNs() : 0;
  const bool capturing = Capturing(stream, per_thread);
  if (g_stats_enabled) capture_ns = NowNs() - at_capture;
  if (capturing) return launch();
  std::uint64_t now = NowNs();
  if (Stale(c, now)) {
    if (GovernorFailed(c)) return launch();
    now = NowNs();  // it waited for the arbiter (fail-closed)
  }
  // Wait at the gate, then for the depth; the gate may have closed meanwhile (the turn passed,
  // the share ran out, a higher class arrived): then wait at it again. The depth wait is
  // bounded: work that never completes (a kernel waiting for a later launch, a persistent
  // kernel) must not hang the application's next launch.
  // Clock readings: `now` is read again only after a wait, and after the launch of a probe.
  std::unique_lock<std::mutex> lock(g.mu, std::defer_lock);
  std::uint64_t depth_ns = kDefaultDepthNs;
  DeviceGovernor* device = nullptr;
  bool continued = false;  // the tracker's short path (TryContinue): no depth wait, no new segment
  for (;;) {
    const std::uint64_t at_gate = g_stats_enabled ? NowNs() : 0;
    if (GateOf(c) != shm::Gate::kOpen) {
      if (!WaitAtGate(c)) return launch();
      now = NowNs();
    }
    const std::uint64_t at_lock = g_stats_enabled ? NowNs() : 0;
    if (g_stats_enabled) gate_ns += at_lock - at_gate;
    if (!lock.try_lock()) {  // the watcher has it: `now` is read again after the wait
      lock.lock();
      now = NowNs();
    }
    if (g_stats_enabled) lock_ns += NowNs() - at_lock;
    device = &DeviceFor(g, region_device);
    DeviceGovernor& waiting = *device;
    const std::uint32_t depth_us = c.depth_us.load(std::memory_order_relaxed);
    depth_ns = depth_us != 0 ? depth_us * 1000ULL : kDefaultDepthNs;
    if (GateOf(c) == shm::Gate::kOpen &&
        waiting.tracker.TryContinue(StreamKey(stream, per_thread), key, now, depth_ns)) {
      continued = true;
      break;
    }
    const std::uint64_t started = now;
    while (waiting.tracker.OverDepth(depth_ns, now)) {
      // Normal: a few times the pending work's expected length (a 100 ms kernel is waited for).
      const std::uint64_t patience =
          std::max(kMaxDepthWaitNs, 4 * waiting.tracker.LongestPendingEstimateNs());
      if (now - started > patience) {
        CountMachineryError(
            "work in flight did not complete in time; a launch went past the depth");
        break;
      }
      waiting.tracker.FenceAll(now, MayRecordFromCaller);
      ++g.depth_waiters;
      g.work.NotifyOne();
      g.completed.WaitFor(lock, std::chrono::milliseconds(1));
      --g.depth_waiters;
      now = NowNs();
    }
    if (g_stats_enabled) depth_wait_ns += now - started;
    const shm::Gate gate = GateOf(c);
    if (gate == shm::Gate::kOpen || gate == shm::Gate::kFree) break;
    lock.unlock();
  }
  if (!g.watcher_started.load()) {
    g.watcher_started.store(true);
    if (!StartWatcher(g, region)) {
      g.disabled = true;
      c.governor_failures.fetch_add(1, std::memory_order_relaxed);
      CountMachineryError(S().fail_closed
                              ? "no watcher thread could be started; launches are refused "
                                "(fail-closed)"
                              : "no watcher thread could be started; launches run ungoverned "
                                "(fail-open)");
      lock.unlock();
      return S().fail_closed ? CUDA_ERROR_OPERATING_SYSTEM : launch();
    }
  }
  DeviceGovernor& d = *device;
  void* stream_key = StreamKey(stream, per_thread);
  const std::uint64_t before_fences = g_stats_enabled ? now : 0;
  const bool measured = continued || d.tracker.BeforeLaunch(stream_key, now, key);
  const bool probe = !continued && measured && d.tracker.LaunchIsProbe(stream_key);
  const std::uint64_t before_real = g_stats_enabled ? NowNs() : 0;
  const CUresult r = launch();
  // One clock reading a launch (before it) but for a probe, whose AfterLaunch needs the time
  // its launch was submitted; the others' fences and stamps are a launch's submission early.
  const std::uint64_t after_real = g_stats_enabled ? NowNs() : 0;
  if (probe) now = g_stats_enabled ? after_real : NowNs();
  if (measured) {
    if (r == CUDA_SUCCESS && continued) {
      d.tracker.ContinuedLaunch(now, depth_ns);
    } else if (r == CUDA_SUCCESS) {
      d.tracker.AfterLaunch(stream_key, now, depth_ns);
    } else {
      d.tracker.Fence(stream_key, now);  // nothing was launched: the start event is dropped
    }
  } else {
    CountMachineryError("a fence event could not be recorded; that work went unmeasured");
  }
  const std::uint64_t now_after_fences = g_stats_enabled ? NowNs() : 0;
  if (r == CUDA_SUCCESS) {  // a failing launch (a sticky fault) is no demand for the GPU
    ++d.launches_unpublished;
    d.last_launch_ns = now;
    if (now >= d.active_stamped_ns + kActiveStampNs) {
      c.active_ns.store(now, std::memory_order_relaxed);
      d.active_stamped_ns = now;
    }
  } else {  // e.g. too few SMs under an MPS limit: the node reports it (metric, Event)
    c.launch_failures.fetch_add(1, std::memory_order_relaxed);
  }
  if (g.watcher_idle) g.work.NotifyOne();
  if (g_stats_enabled) {
    GovernorStats& st = g_governor_stats;
    st.launches.fetch_add(1, std::memory_order_relaxed);
    st.total_ns.fetch_add(now_after_fences - entered, std::memory_order_relaxed);
    st.real_ns.fetch_add(after_real - before_real, std::memory_order_relaxed);
    st.gate_ns.fetch_add(gate_ns, std::memory_order_relaxed);
    st.depth_ns.fetch_add(depth_wait_ns, std::memory_order_relaxed);
    st.capture_ns.fetch_add(capture_ns, std::memory_order_relaxed);
    st.lock_ns.fetch_add(lock_ns, std::memory_order_relaxed);
    st.fences_ns.fetch_add((before_real - before_fences) + (now_after_fences - after_real),
                           std::memory_order_relaxed);
  }
  return r;
}

// Before something waits on GPU work: fence what is open, so that the work up to the wait is
// measured to its end and nothing after it counts.
// A context-wide wait (cuCtxSynchronize, cuEventSynchronize) fences the current device's
// streams only: an event of another device's context cannot be recorded from this one.
// What the wait covers, once it has returned: its stream's work (cuStreamSynchronize), every
// stream's of the current device (cuCtxSynchronize, cuCtxSynchronize_v2 of the current context),
// or nothing known (cuEventSynchronize).
// kNone: nothing is fenced either (a context other than the current one).
enum class Waited { kStream, kContext, kUnknown, kNone };

bool IsCurrentContext(CUcontext ctx) {
  CUcontext current = nullptr;
  const auto get = Real<CudaHook::cuCtxGetCurrent>();
  return get != nullptr && get(&current) == CUDA_SUCCESS && current == ctx;
}

// Each device's FenceTracker::Ticket when the wait began (0 where none was taken).
struct WaitTickets {
  bool taken = false;
  bool all = false;  // a context-wide wait: every stream of `device`
  int device = -1;   // the current device's region index (-1: every device, a stream's own)
  std::uint64_t ticket[shm::kMaxDevices] = {};
};

// The default streams' handles name a stream of every context: a wait on one covers the current
// context's only.
bool IsDefaultStream(CUstream stream) {
  return stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD;
}

WaitTickets FenceBeforeWait(CUstream stream, bool per_thread, Waited waited) {
  WaitTickets tickets;
  Governor& g = *g_governor;
  if (waited == Waited::kNone) return tickets;
  if (!g.watcher_started.load()) return tickets;  // nothing was ever governed in this process
  const RelaxedCapture relaxed;
  const bool all = waited != Waited::kStream;
  int current = -1;
  if (all || IsDefaultStream(stream)) {
    CUdevice dev = 0;
    DeviceQuota quota;
    if (QuotaForCurrentDevice(&quota, &dev) != CUDA_SUCCESS || quota.region_device < 0) {
      return tickets;
    }
    current = quota.region_device;
  }
  std::lock_guard<std::mutex> lock(g.mu);
  const std::uint64_t now = NowNs();
  for (int i = 0; i < static_cast<int>(shm::kMaxDevices); ++i) {
    DeviceGovernor* d = g.devices[i];
    if (d == nullptr || (current >= 0 && i != current)) continue;
    if (all) {
      d->tracker.FenceAll(now, MayRecordFromCaller);
    } else {
      d->tracker.Fence(StreamKey(stream, per_thread), now, MayRecordFromCaller);
    }
    tickets.ticket[i] = d->tracker.Ticket();
  }
  // A context-wide wait covers the streams of the context it waits for; the tracker's streams
  // are the context the governor met first on the device (DeviceGovernor::context), so the
  // wait of another (cuCtxCreate's, a green context's) marks nothing.
  tickets.taken = waited == Waited::kStream ||
                  (waited == Waited::kContext && current >= 0 && g.devices[current] != nullptr &&
                   IsCurrentContext(g.devices[current]->context));
  tickets.all = all;
  tickets.device = current;
  g.work.NotifyOne();
  return tickets;
}

// After a wait returned success: what it covered has completed (FenceTracker::Completed), so
// the next launches' depth no longer counts it while the watcher's poll is still to come.
void CompletedAfterWait(const WaitTickets& tickets, CUstream stream, bool per_thread) {
  if (!tickets.taken) return;
  Governor& g = *g_governor;
  std::lock_guard<std::mutex> lock(g.mu);
  for (int i = 0; i < static_cast<int>(shm::kMaxDevices); ++i) {
    DeviceGovernor* d = g.devices[i];
    if (d == nullptr || (tickets.device >= 0 && i != tickets.device)) continue;
    if (tickets.all) {
      d->tracker.CompletedAll(tickets.ticket[i]);
    } else {
      d->tracker.Completed(StreamKey(stream, per_thread), tickets.ticket[i]);
    }
  }
  g.completed.NotifyAll();  // launches waiting for the depth re-check now
}

}  // namespace

void PublishGovernorCounters() {
  shm::Region* region = g_compute_region;
  if (region == nullptr) return;
  Governor& g = *g_governor;
  // At exit the watcher may hold the mutex for a poll (its driver calls run without it): a few
  // short tries, never an unbounded wait.
  std::unique_lock<std::mutex> lock(g.mu, std::defer_lock);
  for (int i = 0; i < 50 && !lock.try_lock(); ++i) SleepNs(200'000);
  if (!lock.owns_lock()) return;
  for (std::uint32_t i = 0; i < shm::kMaxDevices; ++i) {
    if (g.devices[i] != nullptr) PublishLaunches(*g.devices[i], region->compute[i]);
  }
}

void PrintGovernorStats() {
  const GovernorStats& st = g_governor_stats;
  const std::uint64_t n = st.launches.load();
  if (n == 0) return;
  const auto per = [n](const std::atomic<std::uint64_t>& v) {
    return static_cast<double>(v.load()) / static_cast<double>(n);
  };
  TESSERA_LOG(kWarn, kHook,
              "stats: governed launches %llu: %.0f ns each in the governed path, of which the "
              "real launch %.0f, the capture check %.0f, taking the lock %.0f, the fences %.0f, "
              "waiting at the gate %.0f, waiting for the depth %.0f",
              static_cast<unsigned long long>(n), per(st.total_ns), per(st.real_ns),
              per(st.capture_ns), per(st.lock_ns), per(st.fences_ns), per(st.gate_ns),
              per(st.depth_ns));
  if (const std::uint64_t w = st.waits.load(); w != 0) {
    const auto per_wait = [w](const std::atomic<std::uint64_t>& v) {
      return static_cast<double>(v.load()) / static_cast<double>(w);
    };
    TESSERA_LOG(kWarn, kHook,
                "stats: fenced waits %llu: the fences before %.0f ns each, the wait %.0f, the "
                "completion marks after %.0f",
                static_cast<unsigned long long>(w), per_wait(st.wait_fences_ns),
                per_wait(st.wait_real_ns), per_wait(st.wait_after_ns));
  }
  if (const std::uint64_t p = st.polls.load(); p != 0) {
    TESSERA_LOG(kWarn, kHook, "stats: the watcher's polls %llu: %.0f ns each",
                static_cast<unsigned long long>(p),
                static_cast<double>(st.poll_ns.load()) / static_cast<double>(p));
  }
  TESSERA_LOG(
      kWarn, kHook, "stats: stream captures open at exit: %u%s", g_captures.load(),
      g_captures_untracked.load() ? " (an unintercepted capture entry point was used)" : "");
  Governor& g = *g_governor;
  const std::unique_lock<std::mutex> lock(g.mu, std::try_to_lock);  // (at exit: never wait)
  if (!lock.owns_lock()) return;
  for (const DeviceGovernor* d : g.devices) {
    if (d == nullptr) continue;
    const governor::FenceTracker::Stats& f = d->tracker.stats();
    const auto ms = [](std::uint64_t ns) { return static_cast<double>(ns) / 1e6; };
    TESSERA_LOG(
        kWarn, kHook,
        "stats: fences: %llu segments spanning %.1f ms; charged %.1f ms by %llu exact (%llu "
        "held; %llu held after asking the fences, %llu gates the watchdog opened) and %llu "
        "inexact probes, %.1f ms by %llu "
        "dense segments (%llu launches), %.1f ms by estimates (%llu launches; %llu segments "
        "bounded by their span)",
        static_cast<unsigned long long>(f.segments), ms(f.span_ns), ms(f.probe_ns),
        static_cast<unsigned long long>(f.probes_exact),
        static_cast<unsigned long long>(f.probes_held),
        static_cast<unsigned long long>(f.idle_by_query),
        static_cast<unsigned long long>(f.holds_broken),
        static_cast<unsigned long long>(f.probes_inexact), ms(f.dense_ns),
        static_cast<unsigned long long>(f.dense), static_cast<unsigned long long>(f.dense_launches),
        ms(f.estimate_ns), static_cast<unsigned long long>(f.estimate_launches),
        static_cast<unsigned long long>(f.span_bound));
    // The exact probes by their timing (us): "<0.5:N <1:N <2:N ... <8192:N more:N".
    std::string buckets;
    char item[128];
    for (std::size_t i = 0; i < f.exact_timings.size(); ++i) {
      const auto count = static_cast<unsigned long long>(f.exact_timings[i]);
      if (i == 0) {
        std::snprintf(item, sizeof(item), "<0.5:%llu", count);
      } else if (i + 1 < f.exact_timings.size()) {
        std::snprintf(item, sizeof(item), " <%llu:%llu", 1ULL << (i - 1), count);
      } else {
        std::snprintf(item, sizeof(item), " more:%llu", count);
      }
      buckets += item;
    }
    TESSERA_LOG(kWarn, kHook,
                "stats: probes: offset %llu ns taken off each (empty bracket + setup) until "
                "its kind has %u controls; %llu controls timed, %llu left out; gate %s; exact "
                "timings (us) %s",
                static_cast<unsigned long long>(d->tracker.probe_offset_ns()),
                governor::kMinKindControls, static_cast<unsigned long long>(f.controls),
                static_cast<unsigned long long>(f.controls_left_out), g.events.gate_state(),
                buckets.c_str());
    if (f.long_count == 0) continue;
    std::string times;
    for (std::size_t i = 0; i < f.long_count; ++i) {
      const auto& p = f.long_probes[i];
      std::snprintf(item, sizeof(item), " %llu:%llu%s,host%llu,start%+lld",
                    static_cast<unsigned long long>(p.fenced_at_ns),
                    static_cast<unsigned long long>(p.timing_ns), p.held ? ",held" : "",
                    static_cast<unsigned long long>(p.host_ns),
                    static_cast<long long>(p.start_after_fence_ns));
      times += item;
      if (p.placed) {
        std::snprintf(item, sizeof(item), "+-%llu",
                      static_cast<unsigned long long>(p.uncertainty_ns));
      } else {
        std::snprintf(item, sizeof(item), "(unplaced)");
      }
      times += item;
    }
    TESSERA_LOG(kWarn, kHook,
                "stats: probes of 32 us or more (fenced at, host ns: timing ns, held, host time "
                "from its launch path to its fence, where its start ran against its fence)%s",
                times.c_str());
  }
}

void ResetGovernorAfterFork() { g_governor = new Governor(); }

void CaptureEntryPointHandedOut(const char* symbol, bool intercepted) {
  static constexpr std::string_view kBegin = "cuStreamBeginCapture";
  if (!intercepted && symbol != nullptr && std::string_view(symbol).starts_with(kBegin) &&
      !g_captures_untracked.exchange(true)) {
    TESSERA_LOG(kWarn, kHook,
                "%s is not intercepted: every governed launch asks the driver whether its stream "
                "is being captured",
                symbol);
  }
}

void GovernorStreamDestroyed(CUstream stream) { FenceBeforeWait(stream, false, Waited::kStream); }

std::uint64_t KernelKey(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz) {
  return governor::LaunchKey(f, std::uint64_t{gx} * gy * gz, std::uint64_t{bx} * by * bz);
}
std::uint64_t ConfigKey(const CUlaunchConfig* config, CUfunction f) {
  if (config == nullptr) return governor::LaunchKey(f, 0, 0);
  return KernelKey(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
                   config->blockDimY, config->blockDimZ);
}

// The governed path of each launch (the fast path is inline in intercept.h). `key` names the
// launch's kind for the busy-time estimates (fences.h).
#define TESSERA_GOVERNED_LAUNCH(hook, per_thread, stream, key, params, args)     \
  CUresult Governed_##hook params {                                              \
    const auto real = Real<CudaHook::hook>();                                    \
    shm::Region* region = GovernedRegion();                                      \
    if (region == nullptr) return real args;                                     \
    return Governed(region, stream, per_thread, key, [&] { return real args; }); \
  }
#define TESSERA_KERNEL_KEY KernelKey(f, gx, gy, gz, bx, by, bz)
#define TESSERA_KERNEL_PARAMS                                                                   \
  (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,            \
   unsigned int by, unsigned int bz, unsigned int shared_bytes, CUstream stream, void** params, \
   void** extra)
#define TESSERA_COOPERATIVE_PARAMS                                                   \
  (CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, \
   unsigned int by, unsigned int bz, unsigned int shared_bytes, CUstream stream, void** params)
TESSERA_GOVERNED_LAUNCH(cuLaunchKernel, false, stream, TESSERA_KERNEL_KEY, TESSERA_KERNEL_PARAMS,
                        (f, gx, gy, gz, bx, by, bz, shared_bytes, stream, params, extra))
TESSERA_GOVERNED_LAUNCH(cuLaunchKernel_ptsz, true, stream, TESSERA_KERNEL_KEY,
                        TESSERA_KERNEL_PARAMS,
                        (f, gx, gy, gz, bx, by, bz, shared_bytes, stream, params, extra))
TESSERA_GOVERNED_LAUNCH(cuLaunchCooperativeKernel, false, stream, TESSERA_KERNEL_KEY,
                        TESSERA_COOPERATIVE_PARAMS,
                        (f, gx, gy, gz, bx, by, bz, shared_bytes, stream, params))
TESSERA_GOVERNED_LAUNCH(cuLaunchCooperativeKernel_ptsz, true, stream, TESSERA_KERNEL_KEY,
                        TESSERA_COOPERATIVE_PARAMS,
                        (f, gx, gy, gz, bx, by, bz, shared_bytes, stream, params))
TESSERA_GOVERNED_LAUNCH(cuLaunchKernelEx, false, (config != nullptr ? config->hStream : nullptr),
                        ConfigKey(config, f),
                        (const CUlaunchConfig* config, CUfunction f, void** params, void** extra),
                        (config, f, params, extra))
TESSERA_GOVERNED_LAUNCH(cuLaunchKernelEx_ptsz, true,
                        (config != nullptr ? config->hStream : nullptr), ConfigKey(config, f),
                        (const CUlaunchConfig* config, CUfunction f, void** params, void** extra),
                        (config, f, params, extra))
TESSERA_GOVERNED_LAUNCH(cuGraphLaunch, false, stream, governor::GraphKey(exec),
                        (CUgraphExec exec, CUstream stream), (exec, stream))
TESSERA_GOVERNED_LAUNCH(cuGraphLaunch_ptsz, true, stream, governor::GraphKey(exec),
                        (CUgraphExec exec, CUstream stream), (exec, stream))
#undef TESSERA_GOVERNED_LAUNCH
#undef TESSERA_KERNEL_PARAMS
#undef TESSERA_COOPERATIVE_PARAMS
#undef TESSERA_KERNEL_KEY

namespace {
// Stream capture: counted in g_captures (above).
template <typename Begin>
CUresult BeginCapture(const Begin& begin) {
  g_captures.fetch_add(1);
  // The watcher checks "not captured" and records under the governor's mutex: once this thread
  // has had it, no check made before the count rose can still be recording into this stream.
  { const std::lock_guard<std::mutex> synced(g_governor->mu); }
  const CUresult r = begin();
  if (r != CUDA_SUCCESS) g_captures.fetch_sub(1);
  return r;
}
template <typename End>
CUresult EndCapture(CUstream stream, bool per_thread, const End& end) {
  CUstreamCaptureStatus before = CU_STREAM_CAPTURE_STATUS_NONE, after = before;
  const bool was = CaptureStatus(stream, per_thread, &before) == CUDA_SUCCESS &&
                   before != CU_STREAM_CAPTURE_STATUS_NONE;
  const CUresult r = end();
  // Lowered only for a stream that was captured and no longer is (an end from the wrong thread
  // leaves the capture running); never below 0.
  if (was && CaptureStatus(stream, per_thread, &after) == CUDA_SUCCESS &&
      after == CU_STREAM_CAPTURE_STATUS_NONE) {
    std::uint32_t n = g_captures.load();
    while (n > 0 && !g_captures.compare_exchange_weak(n, n - 1)) {
    }
  }
  return r;
}
}  // namespace
#define TESSERA_CAPTURE(hook, how, params, args)      \
  template <>                                         \
  CUresult Intercept<CudaHook::hook> params {         \
    EnsureInitialized();                              \
    const auto real = Real<CudaHook::hook>();         \
    if (real == nullptr) return CUDA_ERROR_NOT_FOUND; \
    return how;                                       \
  }
#define TESSERA_BEGIN_CAPTURE(hook, params, args) \
  TESSERA_CAPTURE(hook, BeginCapture([&] { return real args; }), params, args)
TESSERA_BEGIN_CAPTURE(cuStreamBeginCapture, (CUstream stream), (stream))
TESSERA_BEGIN_CAPTURE(cuStreamBeginCapture_ptsz, (CUstream stream), (stream))
TESSERA_BEGIN_CAPTURE(cuStreamBeginCapture_v2, (CUstream stream, CUstreamCaptureMode mode),
                      (stream, mode))
TESSERA_BEGIN_CAPTURE(cuStreamBeginCapture_v2_ptsz, (CUstream stream, CUstreamCaptureMode mode),
                      (stream, mode))
TESSERA_BEGIN_CAPTURE(cuStreamBeginCaptureToGraph,
                      (CUstream stream, CUgraph graph, const CUgraphNode* dependencies,
                       const CUgraphEdgeData* edge_data, size_t count, CUstreamCaptureMode mode),
                      (stream, graph, dependencies, edge_data, count, mode))
TESSERA_BEGIN_CAPTURE(cuStreamBeginCaptureToGraph_ptsz,
                      (CUstream stream, CUgraph graph, const CUgraphNode* dependencies,
                       const CUgraphEdgeData* edge_data, size_t count, CUstreamCaptureMode mode),
                      (stream, graph, dependencies, edge_data, count, mode))
TESSERA_CAPTURE(cuStreamEndCapture, EndCapture(stream, false, [&] { return real(stream, graph); }),
                (CUstream stream, CUgraph* graph), (stream, graph))
TESSERA_CAPTURE(cuStreamEndCapture_ptsz,
                EndCapture(stream, true, [&] { return real(stream, graph); }),
                (CUstream stream, CUgraph* graph), (stream, graph))
#undef TESSERA_BEGIN_CAPTURE
#undef TESSERA_CAPTURE

// A wait fenced before (FenceBeforeWait) and, once it returned success, its work marked
// completed (CompletedAfterWait); timed with TESSERA_HOOK_STATS=1.
template <typename Wait>
CUresult FencedWait(CUstream stream, bool per_thread, Waited waited, const Wait& wait) {
  const std::uint64_t entered = g_stats_enabled ? NowNs() : 0;
  const WaitTickets tickets = FenceBeforeWait(stream, per_thread, waited);
  const std::uint64_t fenced = g_stats_enabled ? NowNs() : 0;
  const CUresult r = wait();
  const std::uint64_t returned = g_stats_enabled ? NowNs() : 0;
  if (r == CUDA_SUCCESS) CompletedAfterWait(tickets, stream, per_thread);
  if (g_stats_enabled) {
    GovernorStats& st = g_governor_stats;
    st.waits.fetch_add(1, std::memory_order_relaxed);
    st.wait_fences_ns.fetch_add(fenced - entered, std::memory_order_relaxed);
    st.wait_real_ns.fetch_add(returned - fenced, std::memory_order_relaxed);
    st.wait_after_ns.fetch_add(NowNs() - returned, std::memory_order_relaxed);
  }
  return r;
}

#define TESSERA_FENCED_WAIT(hook, stream, per_thread, waited, params, args)   \
  template <>                                                                 \
  CUresult Intercept<CudaHook::hook> params {                                 \
    EnsureInitialized();                                                      \
    const auto real = Real<CudaHook::hook>();                                 \
    if (real == nullptr) return CUDA_ERROR_NOT_FOUND;                         \
    return FencedWait(stream, per_thread, waited, [&] { return real args; }); \
  }
TESSERA_FENCED_WAIT(cuStreamSynchronize, stream, false, Waited::kStream, (CUstream stream),
                    (stream))
TESSERA_FENCED_WAIT(cuStreamSynchronize_ptsz, stream, true, Waited::kStream, (CUstream stream),
                    (stream))
TESSERA_FENCED_WAIT(cuCtxSynchronize, nullptr, false, Waited::kContext, (void), ())
// CUDA 13's (the runtime's cudaDeviceSynchronize asks for it): a context of its own, or the
// current one for none. Another than the current one is waited for unfenced and unmarked (the
// fences are the current device's).
TESSERA_FENCED_WAIT(cuCtxSynchronize_v2, nullptr, false,
                    ctx == nullptr || IsCurrentContext(ctx) ? Waited::kContext : Waited::kNone,
                    (CUcontext ctx), (ctx))
TESSERA_FENCED_WAIT(cuEventSynchronize, nullptr, false, Waited::kUnknown, (CUevent event), (event))
#undef TESSERA_FENCED_WAIT

}  // namespace tessera::hook
