#include "cli/core_commands.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "tessera/file.h"
#include "tessera/json_writer.h"
#include "tessera/limits.h"
#include "tessera/names.h"
#include "tessera/quantity.h"
#include "tessera/region.h"

#include "agent/drift.h"
#include "agent/node_agent.h"
#include "agent/nvml.h"
#include "cli/commands.h"
#include "cli/doctor_cmd.h"
#include "cli/run_cmd.h"
#include "cli/top_cmd.h"

namespace tessera::cli {

namespace {

// `tessera inventory [--gpus all|UUID,...|i,...] [--node-name N]`: what tessera-node would publish
// for this machine's GPUs (NVML), without Kubernetes. Dependency-free: the GPU host runs it.
int InventoryCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::string gpus = "all";
  std::string node = "localhost";
  for (std::size_t i = 0; i < args.size(); ++i) {
    const bool has_value = i + 1 < args.size();
    if ((args[i] == "--gpus" || args[i] == "--node-name") && has_value) {
      (args[i] == "--gpus" ? gpus : node) = args[i + 1];
      ++i;
    } else {
      err << "tessera inventory: " << args[i] << ": unknown flag, or its value is missing\n"
          << UsageOf("inventory") << "\n";
      return 2;
    }
  }
  auto managed = agent::ParseManagedSpec(gpus);
  if (!managed.ok()) {
    err << "tessera inventory: " << managed.status().message() << "\n";
    return 2;
  }
  auto source = agent::NvmlGpuSource::Open();
  if (!source.ok()) {
    err << "tessera inventory: " << source.status().message() << "\n";
    return ToExitCode(source.status());
  }
  const Status st = agent::PrintInventory(**source, node, TESSERA_VERSION, *managed, out);
  if (!st.ok()) {
    err << "tessera inventory: " << st.message() << "\n";
    return ToExitCode(st);
  }
  return 0;
}

// `tessera drift DIR...`: NVML's view of each container folder (a limits file and a region, as
// tessera-node's slots and `tessera run --keep` leave them) against its region and cap, and
// every GPU process no folder accounts for. Dependency-free: the GPU host runs it.
// With --watch-compute SECONDS it then checks compute drift (agent/compute_drift.h) once a second
// for that long, printing each episode as it begins (with --json also each second's use per
// container); exit 1 if any began.
constexpr std::uint64_t kMaxWatchSeconds = 86'400;

int WatchCompute(const std::vector<agent::WatchedContainer>& containers,
                 const std::set<std::string>& uuids, agent::GpuSource& source,
                 std::uint64_t seconds, const std::string& hook_library, bool json,
                 std::ostream& out) {
  agent::ComputeDrift drift;
  // A process that exec'd without the preload keeps its slot: whether it maps the library tells.
  const agent::MapsLibrary maps_library = agent::ProcMapsLibrary(hook_library);
  const auto start = std::chrono::steady_clock::now();
  int findings = 0;
  for (std::uint64_t tick = 1; tick <= seconds; ++tick) {
    std::this_thread::sleep_until(start + std::chrono::seconds(tick));
    std::map<std::string, std::vector<agent::GpuProcess>> processes;
    std::map<std::string, std::vector<agent::UtilizationSample>> samples;
    std::map<std::string, std::string> errors;
    for (const std::string& uuid : uuids) {
      auto list = source.Processes(uuid);
      auto got = source.ProcessUtilization(uuid, drift.LastSeen(uuid));
      if (!list.ok() || !got.ok()) {
        errors[uuid] = (!list.ok() ? list.status() : got.status()).message();
        continue;
      }
      processes[uuid] = std::move(*list);
      samples[uuid] = std::move(*got);
    }
    const agent::DriftReport report = agent::CheckDrift(containers, processes, agent::ProcCgroupOf);
    const auto now_us =
        static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                       std::chrono::system_clock::now().time_since_epoch())
                                       .count());
    const std::vector<agent::ComputeTenant> tenants =
        agent::ComputeTenantsOf(report, agent::ProcNsPidOf, maps_library);
    const std::vector<agent::ComputeFinding> begun =
        drift.Evaluate(now_us, tenants, samples, errors);
    if (json) {  // each second's use per container, for plots and for finding why
      std::string line;
      {
        ObjectWriter w(line);
        w.Num("second", tick);
        AppendJsonArray(w.Field("tenants"), tenants,
                        [&drift](const agent::ComputeTenant& t, std::string& into) {
                          ObjectWriter o(into);
                          o.Str("container", t.key);
                          o.Real("used", drift.Used(t.key), 4);
                          o.Num("sharePercent", t.share_percent);
                          o.Num("processes", t.pids.size());
                          o.Num("ungoverned", t.ungoverned.size());
                          o.Num("waitedMs", t.waited_ns / 1'000'000);
                        });
      }
      out << line << "\n";
    }
    for (const agent::ComputeFinding& f : begun) {
      ++findings;
      if (json) {
        std::string line;
        {
          ObjectWriter w(line);
          w.Num("second", tick);
          w.Str("kind", agent::Name(f.kind));
          w.Str("container", f.key);
          w.Str("uuid", f.uuid);
          w.Real("used", f.used, 4);
          w.Real("allowed", f.allowed, 4);
          w.Str("message", f.Describe());
        }
        out << line << "\n";
      } else {
        out << "t=" << tick << "s COMPUTE " << agent::Name(f.kind) << " "
            << (f.key.empty() ? f.uuid : f.key) << ": " << f.Describe() << "\n";
      }
      out.flush();
    }
  }
  if (findings == 0 && !json) out << "compute: no drift in " << seconds << " s\n";
  return findings > 0 ? 1 : 0;
}

int DriftCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  std::vector<std::string> dirs;
  bool json = false;
  std::uint64_t watch_seconds = 0;
  std::string hook_library;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--json") {
      json = true;
    } else if (a == "--hook-library") {
      std::error_code ec;
      if (i + 1 >= args.size() || !std::filesystem::is_regular_file(args[i + 1], ec)) {
        err << "tessera drift: --hook-library: expected the path of an existing file (the "
               "preload library the containers load, libtessera-cuda.so)\n"
            << UsageOf("drift") << "\n";
        return 2;
      }
      hook_library = args[++i];
    } else if (a == "--watch-compute") {
      const StatusOr<std::uint64_t> seconds = i + 1 < args.size()
                                                  ? ParseUnsigned(args[i + 1], kMaxWatchSeconds)
                                                  : InvalidArgumentError("missing");
      if (!seconds.ok() || *seconds == 0) {
        err << "tessera drift: --watch-compute: expected whole seconds from 1 to "
            << kMaxWatchSeconds << "\n"
            << UsageOf("drift") << "\n";
        return 2;
      }
      watch_seconds = *seconds;
      ++i;
    } else if (a.starts_with("-")) {
      err << "tessera drift: " << a << ": unknown flag\n" << UsageOf("drift") << "\n";
      return 2;
    } else {
      dirs.push_back(a);
    }
  }
  if (dirs.empty()) {
    err << UsageOf("drift") << "\n";
    return 2;
  }
  std::vector<agent::WatchedContainer> containers;
  std::set<std::string> uuids;
  for (const std::string& dir : dirs) {
    auto text = ReadFile(dir + "/limits", 64u << 10);
    if (!text.ok()) {
      err << "tessera drift: " << dir << ": no limits file (" << text.status().message() << ")\n";
      return ToExitCode(text.status());
    }
    auto limits = ParseLimitsFile(*text);
    if (!limits.ok()) {
      err << "tessera drift: " << dir << "/limits: " << limits.status().message() << "\n";
      return ToExitCode(AsInputError(limits.status()));
    }
    for (const auto& d : limits->devices) uuids.insert(d.uuid);
    containers.push_back({dir, std::move(*limits), dir + "/region"});
  }
  auto source = agent::NvmlGpuSource::Open();
  if (!source.ok()) {
    err << "tessera drift: " << source.status().message() << "\n";
    return ToExitCode(source.status());
  }
  std::map<std::string, std::vector<agent::GpuProcess>> processes;
  for (const std::string& uuid : uuids) {
    auto list = (*source)->Processes(uuid);
    if (!list.ok()) {
      err << "tessera drift: " << list.status().message() << "\n";
      return ToExitCode(list.status());
    }
    processes[uuid] = std::move(*list);
  }
  const agent::DriftReport report = agent::CheckDrift(containers, processes, agent::ProcCgroupOf);
  out << (json ? agent::DriftJson(report) : agent::FormatDrift(report));
  bool over = false;
  for (const auto& c : report.containers) over |= c.over_cap();
  if (watch_seconds != 0 && WatchCompute(containers, uuids, **source, watch_seconds,
                                         FindHookLibrary(hook_library), json, out) != 0) {
    over = true;
  }
  return over ? 1 : 0;  // the answer is "no": a container is over its cap or drifted
}

}  // namespace

int RunCoreCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                   const PolicyLoader& load_policy) {
  if (args.empty()) return -1;
  const std::vector<std::string> rest = SplitFlagValues({args.begin() + 1, args.end()});
  if (args[0] == "doctor") return DoctorCommand(rest, out, err, load_policy);
  if (args[0] == "doctor-worker") return DoctorWorkerCommand(rest, out);
  if (args[0] == "run") return RunCommand({args.begin() + 1, args.end()}, out, err);
  if (args[0] == "version") return VersionCommand(rest, out, err);
  if (args[0] == "inventory") return InventoryCommand(rest, out, err);
  if (args[0] == "drift") return DriftCommand(rest, out, err);
  if (args[0] == "top") return TopCommand(rest, out, err);
  if (args[0] == "names") {
    const bool json = rest.size() == 1 && rest[0] == "--json";
    if (!rest.empty() && !json) {
      err << "tessera names: unexpected \"" << rest[0] << "\"\n" << UsageOf("names") << "\n";
      return 2;
    }
    if (json) {  // [{"kind": ..., "name": ..., "description": ...}, ...]
      std::string text;
      AppendJsonArray(text, names::kAllNames, [](const auto& n, std::string& o) {
        ObjectWriter w(o);
        w.Str("kind", n.kind);
        w.Str("name", n.value);
        w.Str("description", n.description);
      });
      out << text << "\n";
      return 0;
    }
    for (const auto& n : names::kAllNames)
      out << n.kind << "\t" << n.value << "\t" << n.description << "\n";
    return 0;
  }
  return -1;
}

}  // namespace tessera::cli
