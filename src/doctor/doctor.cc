#include "doctor/doctor.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <poll.h>
#include <signal.h>
#include <sstream>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

#include "tessera/file.h"
#include "tessera/quantity.h"
#include "tessera/subprocess.h"

#include "doctor/worker.h"
#include "governor/mps.h"

namespace tessera::doctor {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr std::uint64_t kMiB = 1ULL << 20;
constexpr std::uint64_t kGiB = 1ULL << 30;
constexpr unsigned int kOtherUid = 65534;  // "nobody": the second MPS user

std::string Format(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string Format(const char* format, ...) {
  char text[256];
  va_list args;
  va_start(args, format);
  std::vsnprintf(text, sizeof(text), format, args);
  va_end(args);
  return text;
}

// One tenant: a process in its own process group (so `tessera run` and its child go together),
// stdin a pipe for commands, stdout a pipe of key=value lines.
class Tenant {
 public:
  struct Spec {
    std::vector<std::string> argv;
    std::vector<std::string> env;
    std::optional<unsigned int> uid;  // run as this user (needs root)
    std::string log;                  // stderr goes here (appended); empty: inherited
  };

  static StatusOr<std::unique_ptr<Tenant>> Start(const Spec& spec) {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0) return UnavailableError("pipe failed");
    if (pipe2(out, O_CLOEXEC) != 0) {
      close(in[0]);
      close(in[1]);
      return UnavailableError("pipe failed");
    }
    // An unopenable log leaves stderr inherited, as it always did.
    const int log = spec.log.empty()
                        ? -1
                        : open(spec.log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    SpawnOptions spawn;
    spawn.argv = spec.argv;
    spawn.env_mode = SpawnOptions::Env::kReplace;
    spawn.env = spec.env;
    spawn.stdin_to = Redirect::Fd(in[0]);
    spawn.stdout_to = Redirect::Fd(out[1]);
    if (log >= 0) spawn.stderr_to = Redirect::Fd(log);
    spawn.new_process_group = true;
    spawn.user = spec.uid;
    const StatusOr<pid_t> spawned = Spawn(spawn);  // errors name the program (or the user switch)
    if (log >= 0) close(log);
    close(in[0]);
    close(out[1]);
    if (!spawned.ok()) {
      close(in[1]);
      close(out[0]);
      return spawned.status();
    }
    const pid_t pid = *spawned;
    return std::unique_ptr<Tenant>(new Tenant(pid, in[1], out[0]));
  }

  ~Tenant() {
    CloseInput();
    Kill();
    Reap(2s);
    close(out_);
  }
  Tenant(const Tenant&) = delete;
  Tenant& operator=(const Tenant&) = delete;

  // The value of the first `key=` line, waiting until `deadline`; nullopt if it never came (the
  // process may have ended; `Why()` then says why if it told).
  std::optional<std::string> Await(std::string_view key, Clock::time_point deadline) {
    for (;;) {
      if (auto it = values_.find(std::string(key)); it != values_.end()) {
        std::string v = it->second;
        values_.erase(it);
        return v;
      }
      if (!ReadSome(deadline)) return std::nullopt;
    }
  }
  // Every line the process printed, once its output has ended (or `deadline` passed).
  const std::vector<std::string>& AwaitAllLines(Clock::time_point deadline) {
    while (ReadSome(deadline)) {
    }
    return lines_;
  }
  std::optional<long long> AwaitNumber(std::string_view key, Clock::time_point deadline) {
    auto v = Await(key, deadline);
    if (!v) return std::nullopt;
    return std::strtoll(v->c_str(), nullptr, 10);
  }
  std::optional<double> AwaitReal(std::string_view key, Clock::time_point deadline) {
    auto v = Await(key, deadline);
    if (!v) return std::nullopt;
    return std::strtod(v->c_str(), nullptr);
  }

  void Send(const std::string& line) {
    const std::string text = line + "\n";
    if (in_ >= 0) (void)!write(in_, text.data(), text.size());
  }
  void CloseInput() {
    if (in_ >= 0) close(in_);
    in_ = -1;
  }
  void Kill() {
    if (!reaped_) kill(-pid_, SIGKILL);
  }
  // Waits for the process to end (true) or `limit` to pass.
  bool Reap(std::chrono::milliseconds limit) {
    const auto end = Clock::now() + limit;
    while (!reaped_) {
      if (TryWait(pid_)) {  // ended, or not our child any more
        reaped_ = true;
        kill(-pid_, SIGKILL);  // anything it left in its group
        break;
      }
      if (Clock::now() >= end) return false;
      std::this_thread::sleep_for(5ms);
    }
    return true;
  }
  std::string Why() const { return error_.empty() ? "no answer in time" : error_; }

 private:
  Tenant(pid_t pid, int in, int out) : pid_(pid), in_(in), out_(out) {}
  pid_t pid_;
  int in_, out_;
  bool eof_ = false, reaped_ = false;
  // Reads what is available (waiting up to `deadline`); false once the output ended or time ran
  // out.
  bool ReadSome(Clock::time_point deadline) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0 || eof_) return false;
    pollfd p{out_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return true;  // re-checks the time
    char buffer[4096];
    const ssize_t n = read(out_, buffer, sizeof(buffer));
    if (n <= 0) {
      eof_ = true;
      return false;
    }
    pending_.append(buffer, static_cast<std::size_t>(n));
    std::size_t nl;
    while ((nl = pending_.find('\n')) != std::string::npos) {
      std::string line = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      if (const std::size_t eq = line.find('='); eq != std::string::npos) {
        const std::string k = line.substr(0, eq);
        if (k == "error") error_ = line.substr(eq + 1);
        values_.emplace(k, line.substr(eq + 1));
      }
      lines_.push_back(std::move(line));
    }
    return true;
  }

  std::string pending_, error_;
  std::multimap<std::string, std::string> values_;
  std::vector<std::string> lines_;
};

// The environment every tenant starts from: ours, without anything that would steer the GPU,
// the preload or MPS, then the GPU under test.
std::vector<std::string> BaseEnvironment(const std::string& gpu) {
  std::vector<std::string> env =
      InheritedEnvironment({"CUDA_VISIBLE_DEVICES=", "CUDA_MPS_",
                            "LD_PRELOAD=", "TESSERA_LIMITS_FILE=", "TESSERA_REGION_FILE="});
  env.push_back("CUDA_VISIBLE_DEVICES=" + gpu);
  return env;
}

// A private MPS control daemon (foreground child, own pipe and log folders), for one experiment:
// a client's fault may take the server down with it, so every experiment gets a fresh one.
class MpsDaemon {
 public:
  static StatusOr<std::unique_ptr<MpsDaemon>> Start(const std::string& control,
                                                    const std::string& dir,
                                                    const std::vector<std::string>& base_env) {
    auto d = std::unique_ptr<MpsDaemon>(new MpsDaemon(control, dir));
    std::error_code ec;
    std::filesystem::create_directories(d->pipe_, ec);
    std::filesystem::create_directories(d->log_, ec);
    // Clients of another user must reach the pipes (the MPS-users experiment).
    chmod(dir.c_str(), 0755);
    chmod(d->pipe_.c_str(), 0777);
    chmod(d->log_.c_str(), 0777);
    d->env_ = base_env;
    d->env_.push_back("CUDA_MPS_PIPE_DIRECTORY=" + d->pipe_);
    d->env_.push_back("CUDA_MPS_LOG_DIRECTORY=" + d->log_);
    auto t = Tenant::Start({{control, "-f"}, d->env_, std::nullopt, dir + "/mps-daemon.log"});
    if (!t.ok()) return t.status();
    d->daemon_ = std::move(*t);
    // Ready when its control pipe exists.
    const auto end = Clock::now() + 5s;
    while (!std::filesystem::exists(d->pipe_ + "/control", ec)) {
      if (Clock::now() > end || d->daemon_->Reap(0ms)) {
        return UnavailableError("the MPS control daemon did not start (see " + d->log_ +
                                "/control.log)");
      }
      std::this_thread::sleep_for(10ms);
    }
    return d;
  }
  ~MpsDaemon() {
    // `quit` asks the daemon to stop its servers and exit; then it is killed if still there.
    auto q = Tenant::Start({{control_}, env_, std::nullopt, ""});
    if (q.ok()) {
      (*q)->Send("quit");
      (*q)->CloseInput();
      (*q)->Reap(3s);
    }
    if (!daemon_->Reap(3s)) daemon_->Kill();
  }
  // Client environment entries.
  std::vector<std::string> ClientEnvironment() const {
    return {"CUDA_MPS_PIPE_DIRECTORY=" + pipe_, "CUDA_MPS_LOG_DIRECTORY=" + log_};
  }

 private:
  MpsDaemon(std::string control, const std::string& dir)
      : control_(std::move(control)), pipe_(dir + "/mps-pipe"), log_(dir + "/mps-log") {}
  std::string control_, pipe_, log_;
  std::vector<std::string> env_;
  std::unique_ptr<Tenant> daemon_;
};

// One run of the battery.
class Doctor {
 public:
  Doctor(const DoctorOptions& o, std::ostream& progress) : o_(o), progress_(progress) {}

  StatusOr<Report> Run() {
    char dir[] = "/tmp/tessera-doctor-XXXXXX";
    if (mkdtemp(dir) == nullptr) return UnavailableError("cannot create a temporary folder");
    dir_ = dir;
    struct Cleanup {
      std::string dir;
      bool keep;
      std::ostream& progress;
      ~Cleanup() {
        std::error_code ec;
        if (keep) {
          progress << "tessera doctor: kept " << dir << "\n";
        } else {
          std::filesystem::remove_all(dir, ec);
        }
      }
    } cleanup{dir_, o_.keep, progress_};
    TESSERA_RETURN_IF_ERROR(Identify());
    mps_control_ = governor::FindInPath(o_.mps_control);
    for (SharingMode mode : o_.modes) {
      if (mode == SharingMode::kMps && mps_control_.empty()) {
        report_.unavailable.push_back("mps: " + o_.mps_control + " not found");
        continue;
      }
      report_.modes.push_back(mode);
    }
    MeasureScrubCost();
    for (SharingMode mode : report_.modes) {
      mode_ = mode;
      Experiment("memory hog", [&] { MemoryHog(); });
      Experiment("residual data (exit)", [&] { Residual(false); });
      Experiment("residual data (kill)", [&] { Residual(true); });
      Experiment("interference", [&] { Interference(); });
      Experiment("fault propagation", [&] { FaultPropagation(); });
      Experiment("quota honesty", [&] { QuotaHonesty(); });
      Experiment("compute share", [&] { ComputeShare(); });
      if (mode == SharingMode::kMps) Experiment("MPS users", [&] { MpsUsers(); });
    }
    return report_;
  }

 private:
  // Runs one experiment with a fresh MPS daemon when the mode needs one.
  template <typename Body>
  void Experiment(const char* name, Body body) {
    progress_ << "tessera doctor: " << Name(mode_) << ": " << name << "\n" << std::flush;
    deadline_ = Clock::now() + o_.experiment_limit;
    mps_.reset();
    if (mode_ == SharingMode::kMps) {
      auto d = MpsDaemon::Start(mps_control_, dir_, BaseEnvironment(uuid_));
      if (!d.ok()) {
        mps_error_ = std::string(d.status().message());
        body();  // the findings will say "not measured" with this error
        return;
      }
      mps_ = std::move(*d);
    }
    body();
    mps_.reset();
  }

  // How a tenant of the current mode starts: `role` for the worker, `extra_env` on top.
  // `run_flags` go to `tessera run` in the modes tessera enforces (e.g. a compute share).
  Tenant::Spec SpecFor(const std::vector<std::string>& role,
                       const std::vector<std::string>& extra_env = {},
                       const std::vector<std::string>& program = {},
                       const std::vector<std::string>& run_flags = {}) const {
    Tenant::Spec spec;
    spec.log = dir_ + "/tenants.log";
    spec.env = BaseEnvironment(uuid_);
    if (mps_) {
      for (auto& e : mps_->ClientEnvironment()) spec.env.push_back(e);
    }
    for (const auto& e : extra_env) spec.env.push_back(e);
    if (mode_ != SharingMode::kNative) {
      spec.argv = {o_.self, "run", "--gpu-memory", std::to_string(Cap()), "--gpu", uuid_};
      spec.argv.insert(spec.argv.end(), run_flags.begin(), run_flags.end());
      spec.argv.push_back("--");
    }
    if (program.empty()) {
      spec.argv.push_back(o_.self);
      spec.argv.push_back("doctor-worker");
      for (const auto& r : role) spec.argv.push_back(r);
    } else {
      for (const auto& p : program) spec.argv.push_back(p);
    }
    return spec;
  }

  // Each tenant's memory cap in the modes tessera enforces: a quarter of the GPU.
  std::uint64_t Cap() const { return report_.gpu_memory_bytes / 4 / kMiB * kMiB; }

  StatusOr<std::unique_ptr<Tenant>> Start(const std::vector<std::string>& role,
                                          const std::vector<std::string>& extra_env = {},
                                          const std::vector<std::string>& run_flags = {}) {
    if (mode_ == SharingMode::kMps && !mps_) return UnavailableError(mps_error_);
    return Tenant::Start(SpecFor(role, extra_env, {}, run_flags));
  }

  void Add(Property property, Outcome outcome, std::string measured,
           std::vector<std::pair<std::string, double>> values = {}) {
    report_.findings.push_back({property, mode_, outcome, std::move(measured), std::move(values)});
  }

  Status Identify() {
    mode_ = SharingMode::kNative;
    uuid_ = o_.gpu.empty() ? "0" : o_.gpu;
    auto t = Tenant::Start(SpecFor({"info"}));
    if (!t.ok()) return t.status();
    const auto end = Clock::now() + o_.experiment_limit;
    auto uuid = (*t)->Await("uuid", end);
    if (!uuid) {
      return UnavailableError("cannot reach the GPU \"" + uuid_ + "\": " + (*t)->Why());
    }
    report_.gpu_uuid = uuid_ = *uuid;
    report_.gpu_name = (*t)->Await("name", end).value_or("?");
    report_.gpu_memory_bytes =
        static_cast<std::uint64_t>((*t)->AwaitNumber("total", end).value_or(0));
    const auto cuda = (*t)->AwaitNumber("cuda", end).value_or(0);
    report_.driver = "CUDA " + std::to_string(cuda / 1000) + "." + std::to_string(cuda % 1000 / 10);
    std::istringstream version(ReadFile("/proc/driver/nvidia/version", 64u << 10).value_or(""));
    std::string line;
    if (std::getline(version, line)) {
      // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  ..."
      std::istringstream words(line);
      std::string w;
      while (words >> w) {
        if (!w.empty() && std::isdigit(static_cast<unsigned char>(w[0])) &&
            w.find('.') != std::string::npos) {
          report_.driver = w + " (" + report_.driver + ")";
          break;
        }
      }
    }
    report_.date = o_.date;
    return Status::Ok();
  }

  void MeasureScrubCost() {
    mode_ = SharingMode::kNative;
    auto t = Tenant::Start(SpecFor({"scrub", std::to_string(kGiB)}));
    if (!t.ok()) return;
    const auto end = Clock::now() + o_.experiment_limit;
    if ((*t)->AwaitNumber("scrub", end) == 0)
      report_.scrub_ms_per_gib = (*t)->AwaitReal("ms_per_gib", end);
  }

  // 1. A tenant takes all the memory it can get; can its neighbour still allocate and run?
  void MemoryHog() {
    auto neighbour = Start({"hold", std::to_string(256 * kMiB)});
    if (!neighbour.ok())
      return Add(Property::kMemoryHog, Outcome::kNotMeasured,
                 std::string(neighbour.status().message()));
    if (!(*neighbour)->Await("ready", deadline_)) {
      return Add(Property::kMemoryHog, Outcome::kNotMeasured, "neighbour: " + (*neighbour)->Why());
    }
    auto hog = Start({"hog", std::to_string(kGiB)});
    if (!hog.ok())
      return Add(Property::kMemoryHog, Outcome::kNotMeasured, std::string(hog.status().message()));
    const auto hogged = (*hog)->AwaitNumber("hogged", deadline_);
    if (!hogged) return Add(Property::kMemoryHog, Outcome::kNotMeasured, "hog: " + (*hog)->Why());
    (*neighbour)->Send("grow " + std::to_string(kGiB));
    const auto grow = (*neighbour)->AwaitNumber("grow", deadline_);
    (*neighbour)->Send("alive");
    const auto alive = (*neighbour)->AwaitNumber("alive", deadline_);
    const bool ok = grow == 0 && alive == 0;
    std::string measured = "hog took " + FormatBytesHuman(static_cast<std::uint64_t>(*hogged)) +
                           "; the neighbour's next 1 GiB: " +
                           (grow == 0 ? "ok"
                            : grow    ? "refused (CUresult " + std::to_string(*grow) + ")"
                                      : "no answer") +
                           ", its kernels: " + (alive == 0 ? "ok" : "failed");
    Add(Property::kMemoryHog, ok ? Outcome::kHolds : Outcome::kFails, measured,
        {{"hogBytes", static_cast<double>(*hogged)},
         {"growResult", static_cast<double>(grow.value_or(-1))}});
  }

  // 2. A tenant writes a pattern and exits (or is killed); a new tenant reads what it is given.
  void Residual(bool kill) {
    const Property property = kill ? Property::kResidualKill : Property::kResidualExit;
    const std::uint64_t fill = std::min<std::uint64_t>(2 * kGiB, Cap() / 4 / kMiB * kMiB);
    auto filler = Start({"fill", std::to_string(fill)});
    if (!filler.ok())
      return Add(property, Outcome::kNotMeasured, std::string(filler.status().message()));
    if (const auto r = (*filler)->AwaitNumber("fill", deadline_); r != 0) {
      return Add(property, Outcome::kNotMeasured,
                 "filler: " + (r ? "CUresult " + std::to_string(*r) : (*filler)->Why()));
    }
    (*filler)->Await("ready", deadline_);
    if (kill) {
      (*filler)->Kill();
    } else {
      (*filler)->CloseInput();
    }
    (*filler)->Reap(
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()));
    auto scanner = Start({"scan", std::to_string(2 * fill)});
    if (!scanner.ok())
      return Add(property, Outcome::kNotMeasured, std::string(scanner.status().message()));
    const auto matches = (*scanner)->AwaitNumber("matches", deadline_);
    const auto scanned = (*scanner)->AwaitNumber("scanned", deadline_);
    if (!matches || !scanned || *scanned == 0) {
      return Add(property, Outcome::kNotMeasured, "scanner: " + (*scanner)->Why());
    }
    const double found = static_cast<double>(*matches) * 4;
    std::string measured = FormatBytesHuman(fill) + " of a pattern written, then the tenant " +
                           (kill ? "killed" : "exited") + "; a new tenant read " +
                           FormatBytesHuman(static_cast<std::uint64_t>(*scanned)) + ": " +
                           (*matches == 0 ? "no pattern left"
                                          : FormatBytesHuman(static_cast<std::uint64_t>(found)) +
                                                " of it still there");
    Add(property, *matches == 0 ? Outcome::kHolds : Outcome::kFails, measured,
        {{"writtenBytes", static_cast<double>(fill)},
         {"scannedBytes", static_cast<double>(*scanned)},
         {"foundBytes", found}});
  }

  // Median and p99 of 300 probe launches; `*starved` when they did not finish within `window`.
  std::optional<std::pair<double, double>> ProbeLatency(const std::vector<std::string>& env,
                                                        std::chrono::milliseconds window,
                                                        bool* starved, std::string* why) {
    auto probe = Start({"probe", "300"}, env);
    if (!probe.ok()) {
      *why = std::string(probe.status().message());
      return std::nullopt;
    }
    const auto until = std::min(deadline_, Clock::now() + window);
    const auto p50 = (*probe)->AwaitReal("p50_us", until);
    const auto p99 = (*probe)->AwaitReal("p99_us", until);
    if (!p50 || !p99) {
      *starved = (*probe)->Why() == "no answer in time";
      *why = "probe: " + (*probe)->Why();
      return std::nullopt;
    }
    return std::make_pair(*p50, *p99);
  }

  // 3. Latency of a small kernel alone, then beside a tenant running long kernels on every SM it
  // may use. Under MPS as tessera's spatial priority runs them: the hog a best-effort client
  // that leaves the latency-critical reserve of SMs (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE), the
  // probe a latency-critical client without a limit.
  void Interference() {
    const bool mps = mode_ == SharingMode::kMps;
    const std::uint32_t hog_threads =
        governor::ActiveThreadPercent(0, PriorityClass::kBestEffort, governor::SpatialPolicy{}, 0);
    const std::vector<std::string> env;  // the probe's
    const std::vector<std::string> hog_env =
        mps ? std::vector<std::string>{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=" +
                                           std::to_string(hog_threads),
                                       "CUDA_MPS_CLIENT_PRIORITY=1"}
            : std::vector<std::string>{};
    const std::string how =
        mps ? " (the hog best-effort on " + std::to_string(hog_threads) +
                  " % of the SMs, the probe latency-critical)"
            : "; time-sliced, a running kernel is not preempted: a latency-critical tenant "
              "beside kernels longer than its latency budget needs MPS (trusted tiers) or MIG";
    std::string why;
    bool starved = false;
    const auto alone = ProbeLatency(env, 5s, &starved, &why);
    if (!alone) return Add(Property::kInterference, Outcome::kNotMeasured, why);
    auto spinner = Start({"spin"}, hog_env);
    if (!spinner.ok())
      return Add(Property::kInterference, Outcome::kNotMeasured,
                 std::string(spinner.status().message()));
    if (const auto r = (*spinner)->AwaitNumber("spin", deadline_); r != 0) {
      return Add(Property::kInterference, Outcome::kNotMeasured,
                 "hog: " + (r ? "CUresult " + std::to_string(*r) : (*spinner)->Why()));
    }
    std::this_thread::sleep_for(50ms);
    constexpr auto kWindow = 4s;
    const auto beside = ProbeLatency(env, kWindow, &starved, &why);
    (*spinner)->CloseInput();
    if (!beside && starved) {
      return Add(
          Property::kInterference, Outcome::kFails,
          Format("p50/p99 %.0f/%.0f us alone; beside the hog 300 probes did not finish in %d s "
                 "(starved)",
                 alone->first, alone->second, static_cast<int>(kWindow.count())) +
              how,
          {{"aloneP50Us", alone->first}, {"aloneP99Us", alone->second}, {"starved", 1}});
    }
    if (!beside) return Add(Property::kInterference, Outcome::kNotMeasured, why);
    const double ratio = alone->second > 0 ? beside->second / alone->second : 0;
    Add(Property::kInterference, ratio <= 2.0 ? Outcome::kHolds : Outcome::kFails,
        Format("p50/p99 %.0f/%.0f us alone, %.0f/%.0f us beside the hog (p99 %.1fx)", alone->first,
               alone->second, beside->first, beside->second, ratio) +
            how,
        {{"aloneP50Us", alone->first},
         {"aloneP99Us", alone->second},
         {"besideP50Us", beside->first},
         {"besideP99Us", beside->second},
         {"p99Ratio", ratio}});
  }

  // 4. One tenant faults (illegal address); do three neighbours still run kernels?
  void FaultPropagation() {
    constexpr int kNeighbours = 3;
    std::vector<std::unique_ptr<Tenant>> neighbours;
    for (int i = 0; i < kNeighbours; ++i) {
      auto n = Start({"hold", std::to_string(64 * kMiB)});
      if (!n.ok())
        return Add(Property::kFaultIsolation, Outcome::kNotMeasured,
                   std::string(n.status().message()));
      if (!(*n)->Await("ready", deadline_)) {
        return Add(Property::kFaultIsolation, Outcome::kNotMeasured, "neighbour: " + (*n)->Why());
      }
      neighbours.push_back(std::move(*n));
    }
    auto faulty = Start({"fault"});
    if (!faulty.ok())
      return Add(Property::kFaultIsolation, Outcome::kNotMeasured,
                 std::string(faulty.status().message()));
    const auto fault = (*faulty)->AwaitNumber("fault", deadline_);
    if (!fault || *fault == 0) {
      return Add(
          Property::kFaultIsolation, Outcome::kNotMeasured,
          fault ? "the illegal store did not fault" : "faulting tenant: " + (*faulty)->Why());
    }
    int survived = 0;
    for (auto& n : neighbours) {
      n->Send("alive");
      survived += n->AwaitNumber("alive", deadline_) == 0;
    }
    Add(Property::kFaultIsolation, survived == kNeighbours ? Outcome::kHolds : Outcome::kFails,
        "a tenant's illegal-address fault (CUresult " + std::to_string(*fault) + ") ended " +
            std::to_string(kNeighbours - survived) + " of " + std::to_string(kNeighbours) +
            " neighbours",
        {{"neighbours", kNeighbours},
         {"survived", survived},
         {"faultResult", static_cast<double>(*fault)}});
  }

  // 5. What a tenant is told about memory: the driver (cuMemGetInfo) and nvidia-smi.
  void QuotaHonesty() {
    auto q = Start({"quota"});
    if (!q.ok())
      return Add(Property::kQuotaHonesty, Outcome::kNotMeasured, std::string(q.status().message()));
    const auto total = (*q)->AwaitNumber("total", deadline_);
    if (!total)
      return Add(Property::kQuotaHonesty, Outcome::kNotMeasured, "tenant: " + (*q)->Why());
    std::string smi = "nvidia-smi not found";
    std::optional<std::uint64_t> smi_total;
    if (const std::string path = governor::FindInPath(o_.nvidia_smi); !path.empty()) {
      Tenant::Spec spec = SpecFor(
          {}, {},
          {path, "--query-gpu=memory.total", "--format=csv,noheader,nounits", "--id=" + uuid_});
      auto s = Tenant::Start(spec);
      if (s.ok()) {
        (*s)->CloseInput();
        for (const std::string& line : (*s)->AwaitAllLines(deadline_)) {
          if (!line.empty() && std::isdigit(static_cast<unsigned char>(line[0]))) {
            smi_total = std::strtoull(line.c_str(), nullptr, 10);
            break;
          }
        }
        smi = smi_total ? "nvidia-smi " + FormatBytesHuman(*smi_total * kMiB)
                        : "nvidia-smi: no answer";
      }
    }
    const auto t = static_cast<std::uint64_t>(*total);
    std::string measured = "cuMemGetInfo total " + FormatBytesHuman(t) + ", " + smi;
    if (mode_ == SharingMode::kNative) {
      return Add(Property::kQuotaHonesty, Outcome::kNotApplicable, "no cap: " + measured,
                 {{"cuMemGetInfoTotal", static_cast<double>(t)}});
    }
    const bool driver_ok = t == Cap();
    const bool smi_ok = !smi_total || *smi_total == Cap() / kMiB;
    Add(Property::kQuotaHonesty, driver_ok && smi_ok ? Outcome::kHolds : Outcome::kFails,
        measured + " (cap " + FormatBytesHuman(Cap()) + ")",
        {{"cuMemGetInfoTotal", static_cast<double>(t)},
         {"cap", static_cast<double>(Cap())},
         {"nvidiaSmiTotalMiB", smi_total ? static_cast<double>(*smi_total) : -1}});
  }

  // 6. A 30 % compute share: work done by a compute-bound tenant vs its solo rate. The share is
  // tessera's (`tessera run --gpu-cores 30`, the GPU's arbiter); under MPS the client is also
  // given MPS's own thread percentage, as tessera's MPS backend does.
  void ComputeShare() {
    if (mode_ == SharingMode::kNative) {
      return Add(Property::kComputeShare, Outcome::kNotApplicable,
                 "native sharing has no compute shares");
    }
    auto solo = Start({"burn", "1500"});
    if (!solo.ok())
      return Add(Property::kComputeShare, Outcome::kNotMeasured,
                 std::string(solo.status().message()));
    const auto full = (*solo)->AwaitReal("rate", deadline_);
    solo->reset();
    auto capped = Start({"burn", "1500"},
                        mode_ == SharingMode::kMps
                            ? std::vector<std::string>{"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30"}
                            : std::vector<std::string>{},
                        {"--gpu-cores", "30"});
    if (!capped.ok())
      return Add(Property::kComputeShare, Outcome::kNotMeasured,
                 std::string(capped.status().message()));
    const auto part = (*capped)->AwaitReal("rate", deadline_);
    if (!full || !part || *full <= 0) {
      return Add(Property::kComputeShare, Outcome::kNotMeasured, "burn: " + (*capped)->Why());
    }
    const double delivered = 100.0 * *part / *full;
    Add(Property::kComputeShare, std::fabs(delivered - 30) <= 5 ? Outcome::kHolds : Outcome::kFails,
        Format("a 30 %% hard share (tessera's arbiter%s) delivered %.1f %% of the solo rate "
               "(compute-bound kernels, otherwise idle GPU)",
               mode_ == SharingMode::kMps ? ", and MPS's thread percentage" : "", delivered),
        {{"targetPercent", 30}, {"deliveredPercent", delivered}});
  }

  // 7. Two MPS clients of different users: the second should wait for the first.
  void MpsUsers() {
    if (geteuid() != 0) {
      return Add(Property::kMpsUsers, Outcome::kNotMeasured,
                 "needs root to start a client as another user");
    }
    if (!mps_) return Add(Property::kMpsUsers, Outcome::kNotMeasured, mps_error_);
    // The second user's client runs this program from a copy it can read.
    const std::string copy = dir_ + "/tessera-worker";
    std::error_code ec;
    std::filesystem::copy_file(o_.self, copy, std::filesystem::copy_options::overwrite_existing,
                               ec);
    chmod(copy.c_str(), 0755);
    auto first = Start({"hold", std::to_string(64 * kMiB)});
    if (!first.ok() || !(*first)->Await("ready", deadline_)) {
      return Add(Property::kMpsUsers, Outcome::kNotMeasured, "first client did not start");
    }
    Tenant::Spec spec;
    spec.env = BaseEnvironment(uuid_);
    for (auto& e : mps_->ClientEnvironment()) spec.env.push_back(e);
    spec.argv = {copy, "doctor-worker", "probe", "5"};
    spec.uid = kOtherUid;
    const auto t0 = Clock::now();
    auto second = Tenant::Start(spec);
    if (!second.ok())
      return Add(Property::kMpsUsers, Outcome::kNotMeasured,
                 std::string(second.status().message()));
    constexpr auto kHoldFor = 2s;
    const bool early = (*second)->Await("p50_us", t0 + kHoldFor).has_value();
    (*first)->CloseInput();
    (*first)->Reap(3s);
    const bool late = early || (*second)->Await("p50_us", deadline_).has_value();
    const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!late) {
      return Add(Property::kMpsUsers, Outcome::kNotMeasured,
                 "second user's client: " + (*second)->Why());
    }
    Add(Property::kMpsUsers, early ? Outcome::kHolds : Outcome::kFails,
        early ? "a second user's client ran while the first user's client was connected"
              : Format("a second user's client waited %.1f s, until the first user's client ended "
                       "(co-tenants on one MPS GPU must share a user ID)",
                       waited),
        {{"waitedSeconds", early ? 0.0 : waited}});
  }

  const DoctorOptions& o_;
  std::ostream& progress_;
  Report report_;
  std::string dir_, uuid_, mps_control_, mps_error_;
  SharingMode mode_ = SharingMode::kNative;
  Clock::time_point deadline_;
  std::unique_ptr<MpsDaemon> mps_;
};

}  // namespace

StatusOr<std::vector<SharingMode>> ParseDoctorModes(std::string_view text) {
  std::vector<SharingMode> modes;
  std::size_t start = 0;
  const std::string all(text);
  while (start <= all.size()) {
    const std::size_t comma = std::min(all.find(',', start), all.size());
    const std::string item = all.substr(start, comma - start);
    start = comma + 1;
    auto mode = ParseSharingMode(item);
    if (!mode.ok() || (*mode != SharingMode::kNative && *mode != SharingMode::kShared &&
                       *mode != SharingMode::kMps)) {
      return InvalidArgumentError("--modes: \"" + item +
                                  "\" is not a mode doctor measures; accepted: "
                                  "native, shared, mps (comma-separated)");
    }
    for (SharingMode m : modes) {
      if (m == *mode) return InvalidArgumentError("--modes: \"" + item + "\" is listed twice");
    }
    modes.push_back(*mode);
  }
  return modes;
}

StatusOr<Report> RunDoctor(const DoctorOptions& options, std::ostream& progress) {
  if (options.modes.empty()) return InvalidArgumentError("--modes: no mode to measure");
  return Doctor(options, progress).Run();
}

}  // namespace tessera::doctor
