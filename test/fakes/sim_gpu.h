// A deterministic simulated GPU for testing the compute governor (ADR 0017) end to end without a
// GPU, threads or a wall clock: the arbiter, each container's FenceTracker and a copy of the
// launch path of src/hook/launch_hooks.cc run against one simulated clock. Everything is a
// number on that clock, so the tests assert on simulated GPU time and are exactly repeatable.
//
//   Gpu        the device: streams of kernels and event markers, time-sliced between contexts.
//   Workload   what a container's program asks for next (launch, synchronize, nothing).
//   Container  one container: its EventApi over the Gpu, its FenceTracker, its region's counters
//              and gate, the launch loop and the watcher pass of launch_hooks.cc.
//   Simulation the node: the clock, the containers and the arbiter ticking over them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <vector>

#include "tessera/shm_layout.h"

#include "governor/arbiter.h"
#include "governor/busy_log.h"
#include "governor/fences.h"

namespace tessera::governor::sim {

inline constexpr std::uint64_t kUs = 1'000;
inline constexpr std::uint64_t kMs = 1'000'000;
inline constexpr std::uint64_t kSec = 1'000'000'000;

// The launch path's constants (launch_hooks.cc) and the arbiter host's beat.
inline constexpr std::uint64_t kDefaultDepthNs = 2 * kMs;
inline constexpr std::uint64_t kGatePollNs = 50 * kUs;
inline constexpr std::uint64_t kWatchPollNs = 100 * kUs;
inline constexpr std::uint64_t kIdleFenceNs = 1 * kMs;
inline constexpr std::uint64_t kArbiterTickNs = 200 * kUs;
// The driver's queue of pending launches per stream: an ungoverned launch blocks when it is full.
inline constexpr std::size_t kMaxQueuedPerStream = 1024;
// Ground truth is kept per bin of this length.
inline constexpr std::uint64_t kBinNs = 1 * kMs;

// ------------------------------------------------------------------------------------------------
// The GPU.
//
// Under MPS (spatial contexts: AddContext's `sm_limit`) kernels run side by side on the SMs
// instead: a kernel is given SMs when it starts — at most its width, its context's SM limit and
// what is free; normal and latency-critical clients are served before best-effort ones — keeps
// them until it ends, and progresses at (its SMs / its width) of full speed. So a kernel of a
// client without a limit that started on every SM makes a later arrival wait for it, and a limit
// keeps SMs free for it. Otherwise:
// Processor sharing between contexts (one per container), the limit of a time-slicing GPU with
// short slices: while k contexts have a kernel at the head of some stream, each progresses at 1/k
// of the GPU. Within a context, the streams with a kernel at their head share the context's part
// equally (its kernels run concurrently). A stream runs its items in order; an event marker
// completes when everything queued before it on its stream has, and that moment is its timestamp.
// The GPU is advanced exactly from one kernel completion to the next, so the host step only sets
// how often the host side looks, never how GPU time is counted.
class Gpu {
 public:
  struct Event {
    bool pending = false;
    std::uint64_t at_ns = 0;
    std::uint64_t generation = 0;  // a re-record supersedes a marker still queued
  };
  struct Item {
    double remaining_ns = 0;  // a kernel's exclusive GPU time still to run; unused for markers
    std::uint64_t kernel_ns = 0;
    Event* event = nullptr;  // non-null: an event marker
    std::uint64_t generation = 0;
    double width = 1.0;  // the fraction of the SMs the kernel can use (spatial contexts)
    double sms = 0;      // the SMs it was given when it started (0: not started)
  };
  struct Stream {
    int context = 0;
    std::deque<Item> queue;
  };

  int AddContext() {
    contexts_.emplace_back();
    return static_cast<int>(contexts_.size()) - 1;
  }
  // An MPS client: its kernels run beside the other spatial contexts' on at most `sm_limit` of
  // the SMs; `low_priority` clients (MPS client priority 1: best-effort) are given SMs last.
  int AddSpatialContext(double sm_limit, bool low_priority) {
    const int c = AddContext();
    contexts_.back().spatial = true;
    contexts_.back().sm_limit = sm_limit;
    contexts_.back().low_priority = low_priority;
    return c;
  }
  Stream* NewStream(int context) {
    Stream& s = streams_.emplace_back();
    s.context = context;
    contexts_[static_cast<std::size_t>(context)].streams.push_back(&s);
    return &s;
  }
  Event* NewEvent() { return &events_.emplace_back(); }

  bool Full(const Stream& s) const { return s.queue.size() >= kMaxQueuedPerStream; }
  void Launch(Stream* s, std::uint64_t kernel_ns, double width = 1.0) {
    s->queue.push_back(Item{static_cast<double>(kernel_ns), kernel_ns, nullptr, 0, width, 0});
  }
  void Record(Event* e, Stream* s) {
    ++e->generation;
    if (s->queue.empty()) {  // an idle stream: complete at once
      e->pending = false;
      e->at_ns = now_ns();
    } else {
      e->pending = true;
      s->queue.push_back(Item{0, 0, e, e->generation, 1.0, 0});
    }
  }

  // Everything the context queued has completed.
  bool Drained(int context) const {
    const Context& c = contexts_[static_cast<std::size_t>(context)];
    return std::all_of(c.streams.begin(), c.streams.end(),
                       [](const Stream* s) { return s->queue.empty(); });
  }
  // The moment the context's latest kernel or event completed.
  std::uint64_t LastCompletionNs(int context) const {
    return contexts_[static_cast<std::size_t>(context)].last_completion_ns;
  }

  // Ground truth: GPU time the context received (its kernels' progress) in total, and per bin.
  double ServedNs(int context) const {
    return contexts_[static_cast<std::size_t>(context)].served_ns;
  }
  double ServedInNs(int context, std::uint64_t from_ns, std::uint64_t to_ns) const {
    const std::vector<double>& bins = contexts_[static_cast<std::size_t>(context)].bins;
    double sum = 0;
    for (std::uint64_t b = from_ns / kBinNs; b < to_ns / kBinNs && b < bins.size(); ++b) {
      sum += bins[b];
    }
    return sum;
  }
  // Exclusive GPU time of the kernels that finished.
  std::uint64_t CompletedNs(int context) const {
    return contexts_[static_cast<std::size_t>(context)].completed_ns;
  }

  std::uint64_t now_ns() const { return static_cast<std::uint64_t>(clock_ns_ + 0.5); }

  // Runs the GPU up to `t_ns`; one call must not cross a kBinNs boundary.
  void AdvanceTo(std::uint64_t t_ns) {
    if (std::any_of(contexts_.begin(), contexts_.end(), [](const Context& c) { return c.spatial; }))
      return AdvanceSpatialTo(t_ns);
    const double target = static_cast<double>(t_ns);
    const std::size_t bin = t_ns > 0 ? static_cast<std::size_t>((t_ns - 1) / kBinNs) : 0;
    while (clock_ns_ < target) {
      // Who runs, and the earliest kernel completion at the shares that gives.
      int k = 0;
      for (Context& c : contexts_) {
        c.ready = 0;
        for (Stream* s : c.streams) {
          CompleteMarkers(*s);
          if (!s->queue.empty()) ++c.ready;
        }
        if (c.ready > 0) ++k;
      }
      if (k == 0) {
        clock_ns_ = target;
        break;
      }
      double dt = target - clock_ns_;
      bool to_target = true;
      for (Context& c : contexts_) {
        if (c.ready == 0) continue;
        const double slowdown = static_cast<double>(k * c.ready);
        for (Stream* s : c.streams) {
          if (!s->queue.empty() && s->queue.front().remaining_ns * slowdown < dt) {
            dt = s->queue.front().remaining_ns * slowdown;
            to_target = false;
          }
        }
      }
      for (Context& c : contexts_) {
        if (c.ready == 0) continue;
        const double got = dt / k;
        c.served_ns += got;
        if (c.bins.size() <= bin) c.bins.resize(bin + 1, 0.0);
        c.bins[bin] += got;
        for (Stream* s : c.streams) {
          if (!s->queue.empty()) s->queue.front().remaining_ns -= got / c.ready;
        }
      }
      clock_ns_ = to_target ? target : clock_ns_ + dt;
      for (Context& c : contexts_) {
        for (Stream* s : c.streams) {
          if (s->queue.empty() || s->queue.front().remaining_ns > 1e-3) continue;
          c.completed_ns += s->queue.front().kernel_ns;
          c.last_completion_ns = now_ns();
          s->queue.pop_front();
          CompleteMarkers(*s);
        }
      }
    }
  }

 private:
  // MPS: every context is a client of one server (the tests do not mix the two kinds).
  void AdvanceSpatialTo(std::uint64_t t_ns) {
    const double target = static_cast<double>(t_ns);
    const std::size_t bin = t_ns > 0 ? static_cast<std::size_t>((t_ns - 1) / kBinNs) : 0;
    while (clock_ns_ < target) {
      // Start what can start: normal and latency-critical clients first, then best-effort.
      double used = 0;
      for (Context& c : contexts_) {
        for (Stream* s : c.streams) {
          CompleteMarkers(*s);
          if (!s->queue.empty()) used += s->queue.front().sms;
        }
      }
      for (const bool low : {false, true}) {
        for (Context& c : contexts_) {
          if (c.low_priority != low) continue;
          double mine = 0;
          for (Stream* s : c.streams) mine += s->queue.empty() ? 0 : s->queue.front().sms;
          for (Stream* s : c.streams) {
            if (s->queue.empty() || s->queue.front().sms > 0) continue;
            Item& k = s->queue.front();
            const double give = std::min({k.width, c.sm_limit - mine, 1.0 - used});
            if (give <= 1e-9) continue;
            k.sms = give;
            mine += give;
            used += give;
          }
        }
      }
      // Run to the next completion (or the target).
      double dt = target - clock_ns_;
      bool to_target = true;
      for (Context& c : contexts_) {
        for (Stream* s : c.streams) {
          if (s->queue.empty() || s->queue.front().sms <= 0) continue;
          const Item& k = s->queue.front();
          const double need = k.remaining_ns * k.width / k.sms;
          if (need < dt) {
            dt = need;
            to_target = false;
          }
        }
      }
      for (Context& c : contexts_) {
        bool running = false;
        for (Stream* s : c.streams) {
          if (s->queue.empty() || s->queue.front().sms <= 0) continue;
          Item& k = s->queue.front();
          k.remaining_ns -= dt * k.sms / k.width;
          running = true;
        }
        if (running) {  // ground truth: the time its work occupied the GPU
          c.served_ns += dt;
          if (c.bins.size() <= bin) c.bins.resize(bin + 1, 0.0);
          c.bins[bin] += dt;
        }
      }
      clock_ns_ = to_target ? target : clock_ns_ + dt;
      for (Context& c : contexts_) {
        for (Stream* s : c.streams) {
          if (s->queue.empty() || s->queue.front().sms <= 0 || s->queue.front().remaining_ns > 1e-3)
            continue;
          c.completed_ns += s->queue.front().kernel_ns;
          c.last_completion_ns = now_ns();
          s->queue.pop_front();
          CompleteMarkers(*s);
        }
      }
      if (to_target) break;
    }
  }

  struct Context {
    std::vector<Stream*> streams;
    bool spatial = false;
    double sm_limit = 1.0;
    bool low_priority = false;
    int ready = 0;
    double served_ns = 0;
    std::uint64_t completed_ns = 0;
    std::uint64_t last_completion_ns = 0;
    std::vector<double> bins;
  };
  // Completes the event markers at the head of the stream (all that precedes them is done).
  void CompleteMarkers(Stream& s) {
    while (!s.queue.empty() && s.queue.front().event != nullptr) {
      const Item& m = s.queue.front();
      if (m.generation == m.event->generation) {
        m.event->pending = false;
        m.event->at_ns = now_ns();
      }
      contexts_[static_cast<std::size_t>(s.context)].last_completion_ns = now_ns();
      s.queue.pop_front();
    }
  }

  double clock_ns_ = 0;
  std::vector<Context> contexts_;
  std::deque<Stream> streams_;  // stable addresses: they are the streams' handles
  std::deque<Event> events_;
};

// CUDA events over the simulated GPU, as CudaEvents in launch_hooks.cc wraps the driver's.
class SimEvents final : public EventApi {
 public:
  explicit SimEvents(Gpu* gpu) : gpu_(gpu) {}
  void* Create() override { return gpu_->NewEvent(); }
  void Destroy(void* event) override { (void)event; }  // the Gpu owns them
  bool Record(void* event, void* stream) override {
    gpu_->Record(static_cast<Gpu::Event*>(event), static_cast<Gpu::Stream*>(stream));
    return true;
  }
  State Query(void* event) override {
    return static_cast<Gpu::Event*>(event)->pending ? State::kPending : State::kDone;
  }
  bool ElapsedNs(void* from, void* to, std::uint64_t* ns) override {
    const auto* a = static_cast<Gpu::Event*>(from);
    const auto* b = static_cast<Gpu::Event*>(to);
    if (a->pending || b->pending || b->at_ns < a->at_ns) return false;
    *ns = b->at_ns - a->at_ns;
    return true;
  }

 private:
  Gpu* gpu_;
};

// ------------------------------------------------------------------------------------------------
// Workloads: what a container's program asks for next. Next() is asked again after each launch
// within a host step, so a program launches as fast as the launch path lets it.
class Workload {
 public:
  struct Want {
    enum class Kind { kNothing, kLaunch, kSynchronize };
    Kind kind = Kind::kNothing;
    std::uint64_t kernel_ns = 0;
    int stream = 0;
  };
  virtual ~Workload() = default;
  virtual Want Next(std::uint64_t now_ns) = 0;
  virtual void Launched(std::uint64_t now_ns) { (void)now_ns; }
  // The synchronize returned; `done_ns` is when the GPU finished the work it waited for.
  virtual void Synchronized(std::uint64_t done_ns) { (void)done_ns; }
};

// Always wants to launch one more kernel of `kernel_ns` (from `start_ns` on).
class Saturating final : public Workload {
 public:
  explicit Saturating(std::uint64_t kernel_ns, std::uint64_t start_ns = 0)
      : kernel_ns_(kernel_ns), start_ns_(start_ns) {}
  Want Next(std::uint64_t now_ns) override {
    if (now_ns < start_ns_) return {};
    return {Want::Kind::kLaunch, kernel_ns_, 0};
  }

 private:
  std::uint64_t kernel_ns_;
  std::uint64_t start_ns_;
};

// Saturating for `on_ns`, then launches nothing for `off_ns`, and again.
class Bursty final : public Workload {
 public:
  Bursty(std::uint64_t on_ns, std::uint64_t off_ns, std::uint64_t kernel_ns)
      : on_ns_(on_ns), off_ns_(off_ns), kernel_ns_(kernel_ns) {}
  Want Next(std::uint64_t now_ns) override {
    if (now_ns % (on_ns_ + off_ns_) >= on_ns_) return {};
    return {Want::Kind::kLaunch, kernel_ns_, 0};
  }

 private:
  std::uint64_t on_ns_, off_ns_, kernel_ns_;
};

// One launch is a graph of `kernels` kernels: a single work item of their summed time.
inline std::unique_ptr<Workload> Graph(std::uint64_t kernels, std::uint64_t kernel_ns) {
  return std::make_unique<Saturating>(kernels * kernel_ns);
}
inline std::unique_ptr<Workload> LongKernels(std::uint64_t kernel_ns) {
  return std::make_unique<Saturating>(kernel_ns);
}

// A fixed-seed generator; the mapping to [0, 1) is ours, so numbers are the same everywhere.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : gen_(seed) {}
  double Uniform() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }

 private:
  std::mt19937_64 gen_;
};

// Paced inference: a step launches `kernels` kernels, synchronizes, then thinks for `think_ns`
// (+/- `jitter` of it, from a fixed-seed generator, so steps do not phase-lock with a neighbour).
// A step's latency runs from its first launch attempt to the end of the work it waited for.
class PacedInference final : public Workload {
 public:
  PacedInference(int kernels, std::uint64_t kernel_ns, std::uint64_t think_ns, double jitter,
                 std::uint64_t seed)
      : kernels_(kernels),
        kernel_ns_(kernel_ns),
        think_ns_(think_ns),
        jitter_(jitter),
        rng_(seed) {}

  Want Next(std::uint64_t now_ns) override {
    if (now_ns < think_until_ns_) return {};
    if (launched_ == 0 && !in_step_) {
      in_step_ = true;
      step_start_ns_ = now_ns;
    }
    if (launched_ < kernels_) return {Want::Kind::kLaunch, kernel_ns_, 0};
    return {Want::Kind::kSynchronize, 0, 0};
  }
  void Launched(std::uint64_t now_ns) override {
    (void)now_ns;
    ++launched_;
  }
  void Synchronized(std::uint64_t done_ns) override {
    latencies_.push_back({step_start_ns_, done_ns - step_start_ns_});
    launched_ = 0;
    in_step_ = false;
    const double factor = 1.0 + jitter_ * (2.0 * rng_.Uniform() - 1.0);
    think_until_ns_ = done_ns + static_cast<std::uint64_t>(static_cast<double>(think_ns_) * factor);
  }

  struct Sample {
    std::uint64_t start_ns;
    std::uint64_t latency_ns;
  };
  const std::vector<Sample>& latencies() const { return latencies_; }

 private:
  int kernels_;
  std::uint64_t kernel_ns_, think_ns_;
  double jitter_;
  Rng rng_;
  int launched_ = 0;
  bool in_step_ = false;
  std::uint64_t step_start_ns_ = 0;
  std::uint64_t think_until_ns_ = 0;
  std::vector<Sample> latencies_;
};

// Launch-bound: launches a kernel of `kernel_ns`, then spends `host_ns` of host time (Python,
// a framework's dispatch) before the next; synchronizes every `sync_every` launches. Alone it
// keeps the GPU busy kernel_ns / max(kernel_ns, host_ns) of the time.
class LaunchBound final : public Workload {
 public:
  LaunchBound(std::uint64_t kernel_ns, std::uint64_t host_ns, int sync_every)
      : kernel_ns_(kernel_ns), host_ns_(host_ns), sync_every_(sync_every) {}
  Want Next(std::uint64_t now_ns) override {
    if (launched_ == sync_every_) return {Want::Kind::kSynchronize, 0, 0};
    if (now_ns < next_ns_) return {};
    return {Want::Kind::kLaunch, kernel_ns_, 0};
  }
  void Launched(std::uint64_t now_ns) override {
    ++launched_;
    next_ns_ = now_ns + host_ns_;
  }
  void Synchronized(std::uint64_t done_ns) override {
    (void)done_ns;
    launched_ = 0;
  }

 private:
  std::uint64_t kernel_ns_, host_ns_;
  int sync_every_;
  int launched_ = 0;
  std::uint64_t next_ns_ = 0;
};

// Saturating over `streams` streams of one process, round robin: their kernels run at once.
class ManyStreams final : public Workload {
 public:
  ManyStreams(std::uint64_t kernel_ns, int streams) : kernel_ns_(kernel_ns), streams_(streams) {}
  Want Next(std::uint64_t now_ns) override {
    (void)now_ns;
    return {Want::Kind::kLaunch, kernel_ns_, next_};
  }
  void Launched(std::uint64_t now_ns) override {
    (void)now_ns;
    next_ = (next_ + 1) % streams_;
  }

 private:
  std::uint64_t kernel_ns_;
  int streams_;
  int next_ = 0;
};

// Launch-bound over `streams` streams of one process, round robin: a kernel of `kernel_ns` on
// the next stream, then `host_ns` of host work (after every launch, or with `bursts` after one on
// each stream), a synchronize every `sync_every` launches. Taking turns, each stream is busy a
// small part of the time but their kernels follow each other closely; in bursts under MPS with
// narrow kernels they run at the same moment on different SMs.
class LaunchBoundStreams final : public Workload {
 public:
  LaunchBoundStreams(std::uint64_t kernel_ns, std::uint64_t host_ns, int streams, int sync_every,
                     bool bursts = false)
      : kernel_ns_(kernel_ns),
        host_ns_(host_ns),
        streams_(streams),
        sync_every_(sync_every),
        bursts_(bursts) {}
  Want Next(std::uint64_t now_ns) override {
    const bool between = !bursts_ || next_ == 0;  // host work may come before this launch
    if (between && launched_ >= sync_every_) return {Want::Kind::kSynchronize, 0, 0};
    if (between && now_ns < next_ns_) return {};
    return {Want::Kind::kLaunch, kernel_ns_, next_};
  }
  void Launched(std::uint64_t now_ns) override {
    ++launched_;
    next_ = (next_ + 1) % streams_;
    if (!bursts_ || next_ == 0) next_ns_ = now_ns + host_ns_;
  }
  void Synchronized(std::uint64_t done_ns) override {
    (void)done_ns;
    launched_ = 0;
  }

 private:
  std::uint64_t kernel_ns_, host_ns_;
  int streams_, sync_every_;
  bool bursts_;
  int launched_ = 0;
  int next_ = 0;
  std::uint64_t next_ns_ = 0;
};

// ------------------------------------------------------------------------------------------------
// One container on the GPU: one or more processes (each a context of its own, with one
// application thread — its launch loop — and the watcher thread of launch_hooks.cc), the
// region's Compute counters and verdict as plain numbers, and the region's BusyLog that the
// processes' measured spans are merged into.
// How a container's processes use the GPU: time-sliced contexts (the default), or MPS clients
// with an SM limit, whose kernels each use `width` of the SMs at most.
struct ClientShape {
  bool mps = false;
  double sm_limit = 1.0;
  bool low_priority = false;  // MPS client priority 1 (best-effort)
  double width = 1.0;
};

class Container {
 public:
  // `workloads`: one per process.
  Container(Gpu* gpu, int id, const Tenant& tenant,
            std::vector<std::unique_ptr<Workload>> workloads, int streams,
            const ClientShape& shape = {})
      : gpu_(gpu), id_(id), tenant_(tenant), shape_(shape) {
    for (auto& w : workloads) {
      processes_.push_back(std::make_unique<Process>(gpu, std::move(w), streams, shape));
    }
  }

  // The watcher threads' passes (WatcherMain): fence work left open, keep the epoch, take
  // completed segments, publish the part of their spans not yet in the container's busy log,
  // and stamp the container active while fenced work is in flight.
  void Watch(std::uint64_t now_ns) {
    if (!alive_) return;
    for (auto& p : processes_) {
      if (!p->tracker.HasWork()) continue;
      p->tracker.FenceIdle(now_ns, kIdleFenceNs, [](void*) { return true; });
      if (!p->tracker.HasEpoch()) {
        const Gpu* gpu = gpu_;
        p->tracker.Calibrate(p->epoch_stream, [gpu] { return gpu->now_ns(); });
      }
      Measured m;
      p->tracker.Poll(&m);
      observation_.busy_ns += m.unplaced_ns;
      // In time order, as launch_hooks.cc's Publish adds them (the log keeps 60 spans).
      std::sort(m.spans.begin(), m.spans.end(),
                [](const Span& a, const Span& b) { return a.begin_ns < b.begin_ns; });
      for (const Span& span : m.spans) observation_.busy_ns += AddToUnion(busy_log_, span);
      if (p->tracker.HasFenced()) observation_.active_ns = now_ns;
    }
  }

  // Each application thread at `now_ns`: runs its program until it blocks (gate, depth, a full
  // queue, a synchronize) or has nothing to do.
  void Run(std::uint64_t now_ns) {
    if (!alive_) return;
    for (auto& p : processes_) RunProcess(*p, now_ns);
  }

  // The container's processes die: nothing launches or updates its counters any more; the work
  // already queued on the GPU still runs.
  void Kill() { alive_ = false; }

  int id() const { return id_; }
  // The first process's (the only one's, unless the container was added with several).
  int context() const { return processes_.front()->context; }
  const FenceTracker& tracker() const { return processes_.front()->tracker; }
  Workload& workload() { return *processes_.front()->workload; }
  std::vector<int> contexts() const {
    std::vector<int> out;
    for (const auto& p : processes_) out.push_back(p->context);
    return out;
  }
  bool alive() const { return alive_; }
  const Tenant& tenant() const { return tenant_; }
  const Observation& observation() const { return observation_; }
  const Verdict& verdict() const { return verdict_; }
  void set_verdict(const Verdict& v) { verdict_ = v; }
  std::uint64_t launches() const {
    std::uint64_t n = 0;
    for (const auto& p : processes_) n += p->launches;
    return n;
  }

 private:
  static constexpr int kMaxActionsPerStep = 4096;

  struct Process {
    Process(Gpu* gpu, std::unique_ptr<Workload> w, int stream_count, const ClientShape& shape)
        : workload(std::move(w)),
          context(shape.mps ? gpu->AddSpatialContext(shape.sm_limit, shape.low_priority)
                            : gpu->AddContext()),
          events(gpu),
          tracker(&events) {
      for (int i = 0; i < stream_count; ++i) streams.push_back(gpu->NewStream(context));
      epoch_stream = gpu->NewStream(context);
    }
    std::unique_ptr<Workload> workload;
    int context;
    std::vector<Gpu::Stream*> streams;
    Gpu::Stream* epoch_stream = nullptr;
    SimEvents events;
    FenceTracker tracker;
    bool past_gate = false;
    std::uint64_t depth_ns = kDefaultDepthNs;
    std::uint64_t next_gate_look_ns = 0;
    bool synchronizing = false;
    std::uint64_t sync_from_ns = 0;
    std::uint64_t launches = 0;
  };

  void RunProcess(Process& p, std::uint64_t now_ns) {
    for (int i = 0; i < kMaxActionsPerStep; ++i) {
      if (p.synchronizing) {
        if (!gpu_->Drained(p.context)) return;
        p.synchronizing = false;
        p.workload->Synchronized(std::max(gpu_->LastCompletionNs(p.context), p.sync_from_ns));
      }
      const Workload::Want want = p.workload->Next(now_ns);
      if (want.kind == Workload::Want::Kind::kNothing) return;
      if (want.kind == Workload::Want::Kind::kSynchronize) {
        p.tracker.FenceAll(now_ns);  // FenceBeforeWait (cuCtxSynchronize)
        p.synchronizing = true;
        p.sync_from_ns = now_ns;
        continue;
      }
      if (!TryLaunch(p, now_ns, want)) return;
      p.workload->Launched(now_ns);
    }
  }

  // Governed() of launch_hooks.cc: false when the launch blocks at this moment. A kernel's
  // kind (its key) is its length: the simulated program launches one kind per length.
  bool TryLaunch(Process& p, std::uint64_t now_ns, const Workload::Want& want) {
    Gpu::Stream* stream = p.streams[static_cast<std::size_t>(want.stream)];
    if (gpu_->Full(*stream)) return false;  // the driver's launch blocks
    if (!p.past_gate) {
      if (now_ns < p.next_gate_look_ns) return false;  // asleep in WaitAtGate
      if (verdict_.gate == shm::Gate::kFree) {         // ungoverned: the real call, nothing else
        gpu_->Launch(stream, want.kernel_ns, shape_.width);
        ++p.launches;
        return true;
      }
      if (verdict_.gate != shm::Gate::kOpen) {  // held: stamp waiting, look again later
        observation_.waiting_ns = now_ns;
        p.next_gate_look_ns = now_ns + kGatePollNs;
        return false;
      }
      // Past the gate, the launch waits for depth, then reads the gate again (it may have closed
      // meanwhile) before it is issued.
      p.past_gate = true;
      p.depth_ns = verdict_.depth_us != 0 ? verdict_.depth_us * kUs : kDefaultDepthNs;
    }
    if (p.tracker.OverDepth(p.depth_ns, now_ns)) {
      p.tracker.FenceAll(now_ns);  // and waits for the watcher's next pass
      return false;
    }
    if (verdict_.gate != shm::Gate::kOpen &&
        verdict_.gate != shm::Gate::kFree) {  // closed meanwhile
      p.past_gate = false;
      observation_.waiting_ns = now_ns;
      p.next_gate_look_ns = now_ns + kGatePollNs;
      return false;
    }
    const bool measured = p.tracker.BeforeLaunch(stream, now_ns, want.kernel_ns + 1);
    gpu_->Launch(stream, want.kernel_ns, shape_.width);
    if (measured) p.tracker.AfterLaunch(stream, now_ns, p.depth_ns);
    observation_.active_ns = now_ns;
    p.past_gate = false;
    ++p.launches;
    return true;
  }

  Gpu* gpu_;
  int id_;
  Tenant tenant_;
  ClientShape shape_;
  std::vector<std::unique_ptr<Process>> processes_;
  shm::BusyLog busy_log_{};  // the region's busy[d] (one writer at a time here: no lock)
  Observation observation_;  // the region's busy_ns, active_ns, waiting_ns
  Verdict verdict_;          // the region's gate and depth_us (kFree until the arbiter decides)
  bool alive_ = true;
};

// ------------------------------------------------------------------------------------------------
struct SimOptions {
  std::uint64_t step_ns = 10 * kUs;  // must divide kWatchPollNs, kGatePollNs and kBinNs
  bool governed = true;              // false: no arbiter, every gate stays kFree (native sharing)
  ArbiterOptions arbiter;
};

// The node: one GPU, its containers and its arbiter. Each step at time t: the watchers' passes
// (every kWatchPollNs), the arbiter's tick (every kArbiterTickNs: Observe each container, Decide,
// publish the verdicts), each container's launch loop; then the GPU runs to t + step.
class Simulation {
 public:
  explicit Simulation(SimOptions options = {}) : options_(options), arbiter_(options.arbiter) {}

  int Add(const Tenant& tenant, std::unique_ptr<Workload> workload, int streams = 1) {
    std::vector<std::unique_ptr<Workload>> one;
    one.push_back(std::move(workload));
    return Add(tenant, std::move(one), streams);
  }
  // A container of several processes, one workload each.
  int Add(const Tenant& tenant, std::vector<std::unique_ptr<Workload>> workloads, int streams = 1,
          const ClientShape& shape = {}) {
    const int id = static_cast<int>(containers_.size());
    containers_.push_back(
        std::make_unique<Container>(&gpu_, id, tenant, std::move(workloads), streams, shape));
    if (options_.governed) arbiter_.Join(id, tenant);
    return id;
  }

  void Step() {
    if (now_ns_ % kWatchPollNs == 0) {
      for (auto& c : containers_) c->Watch(now_ns_);
    }
    if (options_.governed && now_ns_ % kArbiterTickNs == 0) {
      for (auto& c : containers_) arbiter_.Observe(c->id(), c->observation());
      arbiter_.Decide(now_ns_);
      for (auto& c : containers_) c->set_verdict(arbiter_.VerdictFor(c->id()));
    }
    for (auto& c : containers_) c->Run(now_ns_);
    now_ns_ += options_.step_ns;
    gpu_.AdvanceTo(now_ns_);
  }
  void RunUntil(std::uint64_t t_ns) {
    while (now_ns_ < t_ns) Step();
  }

  // The container's part of the GPU's time over [from_ns, to_ns) (kBinNs-aligned), in percent.
  double SharePercent(int id, std::uint64_t from_ns, std::uint64_t to_ns) const {
    double served = 0;
    for (int context : container(id).contexts()) {
      served += gpu_.ServedInNs(context, from_ns, to_ns);
    }
    return 100.0 * served / static_cast<double>(to_ns - from_ns);
  }
  // Exclusive GPU time of the container's kernels that finished (all its processes).
  std::uint64_t CompletedNs(int id) const {
    std::uint64_t n = 0;
    for (int context : container(id).contexts()) n += gpu_.CompletedNs(context);
    return n;
  }

  std::uint64_t now_ns() const { return now_ns_; }
  Container& container(int id) { return *containers_[static_cast<std::size_t>(id)]; }
  const Container& container(int id) const { return *containers_[static_cast<std::size_t>(id)]; }
  const Gpu& gpu() const { return gpu_; }
  const Arbiter& arbiter() const { return arbiter_; }

 private:
  SimOptions options_;
  Gpu gpu_;
  Arbiter arbiter_;
  std::vector<std::unique_ptr<Container>> containers_;
  std::uint64_t now_ns_ = 0;
};

}  // namespace tessera::governor::sim
