#include "cli/run_cmd.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <optional>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <utility>

#include "tessera/limits.h"
#include "tessera/names.h"
#include "tessera/quantity.h"
#include "tessera/region.h"
#include "tessera/subprocess.h"

#include "agent/local_gpu.h"
#include "cli/commands.h"
#include "governor/arbiter_host.h"
#include "governor/mps.h"

namespace tessera::cli {
namespace {

Status UsageError(const std::string& what) {
  return InvalidArgumentError(what + "\n" + std::string(UsageOf("run")));
}

// Whether the GPUs' compute arbiter has made a first decision for this container on each of its
// `devices` (its beat is set), waiting up to half a second.
bool AwaitFirstDecision(const shm::Region& region, std::size_t devices) {
  for (int waited_ms = 0;; ++waited_ms) {
    bool all = true;
    for (std::size_t i = 0; i < devices; ++i) {
      all &= region.compute[i].arbiter_beat_ns.load(std::memory_order_relaxed) != 0;
    }
    if (all) return true;
    if (waited_ms == 500) return false;
    const timespec nap{0, 1'000'000};
    nanosleep(&nap, nullptr);
  }
}

volatile sig_atomic_t g_child = 0;
void Forward(int sig) {
  if (g_child > 0) kill(g_child, sig);
}

}  // namespace

std::string FindHookLibrary(const std::string& flag) {
  if (!flag.empty()) return flag;
  const std::string variable(names::kEnvHookLibrary);
  if (const char* env = std::getenv(variable.c_str()); env != nullptr && env[0] != '\0') return env;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  const auto bin = exe.parent_path();
  for (const auto& candidate :
       {bin / "../lib/libtessera-cuda.so", bin / "../../src/hook/libtessera-cuda.so",
        bin / "libtessera-cuda.so"}) {
    if (std::filesystem::exists(candidate, ec))
      return std::filesystem::weakly_canonical(candidate, ec).string();
  }
  return {};
}

StatusOr<RunOptions> ParseRunArgs(const std::vector<std::string>& args) {
  RunOptions o;
  bool have_ask = false;
  std::size_t i = 0;
  std::optional<std::string> inline_value;  // --flag=value
  const auto value = [&](const std::string& flag) -> StatusOr<std::string> {
    if (inline_value) return *std::exchange(inline_value, std::nullopt);
    if (i + 1 >= args.size() || args[i + 1] == "--") {
      return UsageError(flag + " needs a value" +
                        (i + 1 < args.size() ? std::string(" before --") : std::string()));
    }
    return args[++i];
  };
  for (; i < args.size(); ++i) {
    std::string a = args[i];
    inline_value.reset();
    if (a.starts_with("--") && a.size() > 2) {
      if (const std::size_t eq = a.find('='); eq != std::string::npos) {
        inline_value = a.substr(eq + 1);
        a.resize(eq);
      }
    }
    if (a == "--") {
      o.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
      break;
    }
    if (a == "--gpu-memory") {
      TESSERA_ASSIGN_OR_RETURN(std::string v, value(a));
      auto bytes = ParseQuantity(v);
      if (!bytes.ok()) return bytes.status().WithContext("--gpu-memory");
      if (*bytes == 0) return InvalidArgumentError("--gpu-memory: must be more than 0 (e.g. 4Gi)");
      o.gpu_memory_bytes = *bytes;
      have_ask = true;
    } else if (a == "--gpu-cores") {
      TESSERA_ASSIGN_OR_RETURN(std::string v, value(a));
      unsigned cores = 0;
      const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), cores);
      if (ec != std::errc() || end != v.data() + v.size() || cores < 1 || cores > 100) {
        return UsageError("--gpu-cores: \"" + QuoteForMessage(v) +
                          "\" is not a whole percent of one GPU, 1-100");
      }
      o.gpu_cores = cores;
      have_ask = true;
    } else if (a == "--mps-lc-reserve") {
      TESSERA_ASSIGN_OR_RETURN(std::string v, value(a));
      unsigned reserve = 0;
      const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), reserve);
      if (ec != std::errc() || end != v.data() + v.size() ||
          reserve > 100 - governor::kMinSmPercent) {
        return UsageError("--mps-lc-reserve: \"" + QuoteForMessage(v) +
                          "\" is not a whole percent of the SMs, 0-" +
                          std::to_string(100 - governor::kMinSmPercent));
      }
      o.spatial.lc_reserve_percent = reserve;
    } else if (a == "--compute") {
      TESSERA_ASSIGN_OR_RETURN(std::string v, value(a));
      auto c = ParseComputeMode(v);
      if (!c.ok()) return c.status().WithContext("--compute");
      o.compute = *c;
    } else if (a == "--compute-window") {
      TESSERA_ASSIGN_OR_RETURN(std::string v, value(a));
      const auto ms = ParseComputeWindowMs(v);
      if (!ms) {
        return UsageError("--compute-window: \"" + QuoteForMessage(v) +
                          "\" is not a whole number of ms, " + ComputeWindowRange());
      }
      o.compute_window_ms = *ms;
    } else if (a == "--priority") {
      TESSERA_ASSIGN_OR_RETURN(std::string v, value(a));
      auto p = ParsePriorityClass(v);
      if (!p.ok()) return p.status().WithContext("--priority");
      o.priority = *p;
      have_ask = true;
    } else if (a == "--mode") {
      TESSERA_ASSIGN_OR_RETURN(std::string v, value(a));
      auto m = ParseSharingMode(v);
      if (!m.ok()) return m.status().WithContext("--mode");
      if (*m != SharingMode::kShared && *m != SharingMode::kMps) {
        return UsageError("--mode: tessera run runs shared or mps (\"" + QuoteForMessage(v) +
                          "\" is not local)");
      }
      o.mode = *m;
      have_ask = true;
    } else if (a == "--arbiter-dir") {
      TESSERA_ASSIGN_OR_RETURN(o.arbiter_dir, value(a));
    } else if (a == "--mps-control") {
      TESSERA_ASSIGN_OR_RETURN(o.mps_control, value(a));
    } else if (a == "--gpu") {
      TESSERA_ASSIGN_OR_RETURN(std::string list, value(a));
      std::size_t start = 0;
      while (true) {
        const std::size_t comma = list.find(',', start);
        std::string item =
            list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        if (item.empty())
          return UsageError("--gpu: an empty entry in \"" + QuoteForMessage(list) + "\"");
        if (std::find(o.gpus.begin(), o.gpus.end(), item) != o.gpus.end()) {
          return UsageError("--gpu: \"" + QuoteForMessage(item) + "\" is listed twice");
        }
        o.gpus.push_back(std::move(item));
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    } else if (a == "--context-bytes") {
      TESSERA_ASSIGN_OR_RETURN(std::string v, value(a));
      if (v == "auto") {
        o.measure_context = true;
      } else {
        auto bytes = ParseQuantity(v);
        if (!bytes.ok()) return bytes.status().WithContext("--context-bytes (auto or a quantity)");
        o.measure_context = false;
        o.context_bytes = *bytes;
      }
    } else if (a == "--fail-closed" || a == "--keep") {
      if (inline_value) return UsageError(a + " takes no value");
      (a == "--keep" ? o.keep : o.fail_closed) = true;
    } else if (a == "--hook-library") {
      TESSERA_ASSIGN_OR_RETURN(o.hook_library, value(a));
    } else {
      return UsageError("unknown argument \"" + QuoteForMessage(a) + "\"");
    }
  }
  if (!have_ask)
    return UsageError("nothing to enforce: give --gpu-memory, --gpu-cores, --priority or --mode");
  if (o.compute_window_ms != 0 && (o.gpu_cores == 0 || o.compute != ComputeMode::kHard)) {
    return UsageError("--compute-window: applies to a hard share (--gpu-cores N --compute hard)");
  }
  if (o.mode == SharingMode::kMps && o.gpus.size() > 1) {
    return UsageError("--mode mps: one GPU per run (each GPU has its own MPS daemon)");
  }
  if (o.mode == SharingMode::kMps) {
    if (Status s = governor::CheckSmFloor(o.gpu_cores, "--gpu-cores"); !s.ok())
      return UsageError(s.message());
  }
  if (o.command.empty()) return UsageError("no command after --");
  return o;
}

StatusOr<int> RunUnderCap(const RunOptions& o, std::ostream& err) {
  const std::string hook = FindHookLibrary(o.hook_library);
  if (hook.empty()) {
    return NotFoundError(
        "cannot find libtessera-cuda.so beside the tessera binary (use --hook-library or " +
        std::string(names::kEnvHookLibrary) + ")");
  }
  if (access(hook.c_str(), R_OK) != 0) {
    const int why = errno;
    const std::string from =
        !o.hook_library.empty() ? "--hook-library" : std::string(names::kEnvHookLibrary);
    return NotFoundError(from + ": cannot read " + hook + ": " + std::strerror(why));
  }
  std::vector<agent::LocalGpu> gpus;
  for (const std::string& selector : o.gpus.empty() ? std::vector<std::string>{""} : o.gpus) {
    TESSERA_ASSIGN_OR_RETURN(agent::LocalGpu gpu,
                             agent::ProbeLocalGpu(selector, o.measure_context));
    if (o.gpu_memory_bytes > gpu.memory_bytes) {
      return InvalidArgumentError("--gpu-memory: " + FormatQuantity(o.gpu_memory_bytes) +
                                  " is more than GPU " + gpu.uuid + " has (" +
                                  FormatQuantity(gpu.memory_bytes) + ")");
    }
    if (o.measure_context && !gpu.context_measured) {
      err << "tessera run: could not measure the CUDA context size on " << gpu.uuid
          << " with NVML; contexts are not charged (use --context-bytes)\n";
    }
    if (!o.measure_context) gpu.context_bytes = o.context_bytes;
    gpus.push_back(std::move(gpu));
  }
  // The node agent's part: a private folder with the limits file (read-only) and the region.
  std::string dir = (std::filesystem::temp_directory_path() / "tessera-run-XXXXXX").string();
  if (mkdtemp(dir.data()) == nullptr) return UnavailableError("cannot create a temporary folder");
  // Another user's `tessera run` may host this GPU's arbiter: it must reach our limits file
  // (0444) and region (0666) by name, though it cannot list the folder.
  chmod(dir.c_str(), 0711);
  // Removes the folder on every way out, unless --keep.
  struct Cleanup {
    const std::string& dir;
    bool keep;
    ~Cleanup() {
      std::error_code ec;
      if (!keep) std::filesystem::remove_all(dir, ec);
    }
  } cleanup{dir, o.keep};
  const std::string limits_path = dir + "/limits";
  const std::string region_path = dir + "/region";
  Limits limits;
  limits.pod = "local/tessera-run-" + std::to_string(getpid());  // one name per run (metrics, top)
  limits.container = "main";
  limits.pod_uid = "local";
  limits.fail_closed = o.fail_closed;
  limits.priority = o.priority;
  limits.mode = o.mode;
  limits.compute = o.compute;
  limits.compute_window_ms = o.compute_window_ms;
  std::vector<shm::DeviceLimit> region_devices;
  std::vector<std::string> uuids;
  std::string visible;
  for (const agent::LocalGpu& gpu : gpus) {
    const std::uint64_t cap = o.gpu_memory_bytes != 0 ? o.gpu_memory_bytes : gpu.memory_bytes;
    limits.devices.push_back({gpu.uuid, cap, o.gpu_cores, gpu.context_bytes, gpu.stream_bytes});
    region_devices.push_back({gpu.uuid, cap, o.gpu_cores});
    uuids.push_back(gpu.uuid);
    visible += (visible.empty() ? "" : ",") + gpu.uuid;
  }
  {
    std::ofstream out(limits_path);
    out << FormatLimitsFile(limits);
    if (!out) return UnavailableError("cannot write " + limits_path);
  }
  chmod(limits_path.c_str(), 0444);
  auto region = shm::Mapping::Create(region_path, region_devices);
  if (!region.ok()) return region.status();
  // The GPU's compute arbiter, shared with every other `tessera run` of the machine, and in
  // mode mps its MPS daemon. Both are left before the folder is removed.
  const std::string arbiter_dir =
      o.arbiter_dir.empty() ? governor::DefaultLocalArbiterDir() : o.arbiter_dir;
  std::unique_ptr<governor::LocalMps> mps;
  if (o.mode == SharingMode::kMps) {
    auto joined = governor::LocalMps::Join(arbiter_dir + "/" + uuids.front() + "/mps",
                                           uuids.front(), o.mps_control);
    if (!joined.ok()) return joined.status();
    mps = std::move(joined).value();
  }
  auto arbiter = governor::LocalArbiter::Register(arbiter_dir, limits_path, region_path, uuids);
  if (!arbiter.ok()) return arbiter.status();
  // The command starts once the arbiter has decided for it on every GPU: until then its gates
  // read free and its first launches would run ungoverned (another `tessera run` hosting the
  // arbiter finds us at its next scan, within a tenth of a second). Bounded: a host that never
  // comes leaves the launches as free as they are on a GPU without one.
  if (!AwaitFirstDecision(*region->region(), gpus.size())) {
    err << "tessera run: the GPU's compute arbiter has not decided yet; starting anyway\n";
  }

  // The command's environment: ours, less what would steer the GPU, the preload or MPS elsewhere.
  const std::string limits_variable = std::string(names::kEnvLimitsFile) + "=";
  const std::string region_variable = std::string(names::kEnvRegionFile) + "=";
  std::vector<std::string> env = InheritedEnvironment(
      {"LD_PRELOAD=", "CUDA_VISIBLE_DEVICES=", limits_variable, region_variable, "CUDA_MPS_"});
  std::string preload = hook;
  if (const char* ours = std::getenv("LD_PRELOAD"); ours != nullptr && *ours != '\0') {
    preload += ":" + std::string(ours);
  }
  env.push_back("LD_PRELOAD=" + preload);
  env.push_back(std::string(names::kEnvLimitsFile) + "=" + limits_path);
  env.push_back(std::string(names::kEnvRegionFile) + "=" + region_path);
  env.push_back("CUDA_VISIBLE_DEVICES=" + visible);
  if (mps) {
    // Spatial priority: the SM limit is fixed when the client's context is created.
    const std::uint32_t threads =
        governor::ActiveThreadPercent(o.gpu_cores, o.priority, o.spatial,
                                      governor::LatencyCriticalMpsAsks(arbiter_dir, uuids.front()));
    for (std::string& e : governor::MpsClientEnvironment(mps->pipe_dir(), mps->log_dir(),
                                                         o.gpu_memory_bytes, threads, o.priority)) {
      env.push_back(std::move(e));
    }
    if (threads < 100) {
      err << "tessera run: MPS client limited to " << threads << " % of the SMs"
          << (governor::YieldsSms(o.priority, o.spatial)
                  ? " (leaving latency-critical clients their reserve)\n"
                  : "\n");
    }
  }
  if (o.keep) err << "tessera run: folder " << dir << " (kept)\n";  // for `tessera drift DIR`
  for (const agent::LocalGpu& gpu : gpus) {
    err << "tessera run: " << gpu.name << " " << gpu.uuid << ", cap "
        << (o.gpu_memory_bytes != 0 ? FormatBytesHuman(o.gpu_memory_bytes) : std::string("none"))
        << " (context " << FormatBytesHuman(gpu.context_bytes);
    if (gpu.stream_bytes != 0) err << ", streams " << FormatBytesHuman(gpu.stream_bytes) << " each";
    err << (gpu.context_measured ? ", measured" : "") << "), compute "
        << (o.gpu_cores != 0 ? std::to_string(o.gpu_cores) + " % " + std::string(Name(o.compute))
                             : std::string("no share"))
        << ", priority " << Name(o.priority) << ", mode " << Name(o.mode)
        << (mps ? std::string(mps->started_daemon() ? " (started the GPU's MPS daemon)"
                                                    : " (joined the GPU's MPS daemon)")
                : "")
        << "\n";
  }
  // Like system(): the terminal's SIGINT/SIGQUIT reach the child through the process group,
  // so the parent ignores them; SIGTERM/SIGHUP sent to us are forwarded. The child starts with
  // default dispositions.
  struct sigaction ignore {
  }, forward{}, old_int{}, old_quit{}, old_term{}, old_hup{};
  ignore.sa_handler = SIG_IGN;
  forward.sa_handler = Forward;
  sigaction(SIGINT, &ignore, &old_int);
  sigaction(SIGQUIT, &ignore, &old_quit);
  sigaction(SIGTERM, &forward, &old_term);
  sigaction(SIGHUP, &forward, &old_hup);
  // The command runs beside us (not exec'd in our place): we leave the arbiter and MPS, print
  // the closing line and remove the folder once it has ended. Like posix_spawnp: $PATH searched,
  // exactly `env`, our streams, the four signals above at their defaults.
  SpawnOptions spawn;
  spawn.argv = o.command;
  spawn.search_path = true;
  spawn.env_mode = SpawnOptions::Env::kReplace;
  spawn.env = std::move(env);
  spawn.default_signals = {SIGINT, SIGQUIT, SIGTERM, SIGHUP};
  const StatusOr<pid_t> spawned = Spawn(spawn);
  const auto restore = [&] {
    sigaction(SIGINT, &old_int, nullptr);
    sigaction(SIGQUIT, &old_quit, nullptr);
    sigaction(SIGTERM, &old_term, nullptr);
    sigaction(SIGHUP, &old_hup, nullptr);
  };
  if (!spawned.ok()) {
    restore();
    return NotFoundError(spawned.status().message());  // "cannot run \"cmd\": reason"
  }
  const pid_t pid = *spawned;
  g_child = pid;
  const StatusOr<int> waited = Wait(pid);
  const int status = waited.ok() ? *waited : 0;  // as ever: a child we cannot reap reads as exit 0
  g_child = 0;
  restore();
  arbiter->reset();
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    const shm::Device& d = region->region()->devices[i];
    const shm::Compute& c = region->region()->compute[i];
    err << "tessera run: " << (gpus.size() > 1 ? gpus[i].uuid + ": " : std::string()) << "peak "
        << FormatBytesHuman(d.peak_bytes.load()) << " of " << FormatBytesHuman(d.limit_bytes)
        << ", " << d.oom_rejections.load() << " allocation(s) refused; GPU busy "
        << c.busy_ns.load() / 1'000'000 << " ms, throttled " << c.throttled_ns.load() / 1'000'000
        << " ms, held for priority " << c.priority_held_ns.load() / 1'000'000 << " ms, "
        << c.launches.load() << " governed launch(es)";
    if (c.governor_failures.load() != 0) {
      err << "; the compute governor failed under " << c.governor_failures.load()
          << " launch(es), which "
          << (o.fail_closed ? "waited " + std::to_string(c.governor_down_ns.load() / 1'000'000) +
                                  " ms for it (fail-closed)"
                            : "ran ungoverned (fail-open)");
    }
    err << "\n";
  }
  if (o.keep) err << "tessera run: kept " << dir << "\n";
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int RunCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  (void)out;
  auto options = ParseRunArgs(args);
  if (!options.ok()) {
    err << "tessera run: " << options.status().message() << "\n";
    return 2;
  }
  auto code = RunUnderCap(*options, err);
  if (!code.ok()) {
    err << "tessera run: " << code.status().message() << "\n";
    return ToExitCode(code.status());
  }
  return *code;
}

}  // namespace tessera::cli
