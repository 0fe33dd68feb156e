#include "cli/top_cmd.h"

#include <charconv>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "tessera/file.h"
#include "tessera/names.h"

#include "agent/drift.h"
#include "agent/nvml.h"
#include "cli/commands.h"
#include "governor/arbiter_host.h"
#include "observe/observe.h"

namespace tessera::cli {
namespace {

volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void OnTopInterrupt(int) { g_interrupted = 1; }

struct TopOptions {
  std::string state_dir = std::string(names::kPathHostState);
  std::string local_dir = governor::DefaultLocalArbiterDir();
  std::string from;  // "": local
  bool once = false;
  bool watch = false;  // refresh even when stdout is not a terminal
  bool json = false;   // one snapshot as JSON (implies --once)
  int interval_s = 2;
  int columns = 100;
  std::string nvml_library = "libnvidia-ml.so.1";
};

StatusOr<TopOptions> ParseTopOptions(const std::vector<std::string>& args) {
  TopOptions o;
  auto number = [](const std::string& flag, const std::string& text, int low,
                   int high) -> StatusOr<int> {
    int v = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size() || v < low || v > high) {
      return InvalidArgumentError(flag + " " + text + ": expected an integer from " +
                                  std::to_string(low) + " to " + std::to_string(high));
    }
    return v;
  };
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    if (flag == "--once" || flag == "--watch" || flag == "--json") {
      (flag == "--once" ? o.once : flag == "--watch" ? o.watch : o.json) = true;
      continue;
    }
    if (i + 1 >= args.size())
      return InvalidArgumentError(flag + ": unknown flag, or its value is missing");
    const std::string& value = args[++i];
    if (flag == "--interval-s") {
      auto v = number(flag, value, 1, 3600);
      if (!v.ok()) return v.status();
      o.interval_s = *v;
    } else if (flag == "--columns") {
      auto v = number(flag, value, 60, 400);
      if (!v.ok()) return v.status();
      o.columns = *v;
    } else if (flag == "--state-dir") {
      o.state_dir = value;
    } else if (flag == "--local-dir") {
      o.local_dir = value;
    } else if (flag == "--nvml-library") {
      o.nvml_library = value;
    } else if (flag == "--from") {
      o.from = value;
    } else {
      return InvalidArgumentError(flag + ": unknown flag");
    }
  }
  if (o.once && o.watch) return InvalidArgumentError("--once and --watch: give one of them");
  if (o.json && o.watch)
    return InvalidArgumentError("--json and --watch: --json prints one snapshot");
  return o;
}

// This machine: NVML's GPUs (when it loads), the node's slots and the live `tessera run`s, with
// NVML's per-container figure (the drift check's attribution).
class LocalSource {
 public:
  explicit LocalSource(const TopOptions& o) : o_(o) {
    auto nvml = agent::NvmlGpuSource::Open(o.nvml_library);
    if (nvml.ok()) nvml_ = std::move(*nvml);
  }

  observe::Snapshot Read() {
    observe::Snapshot s;
    char host[256] = {};
    if (gethostname(host, sizeof(host) - 1) == 0) s.node = host;
    std::vector<observe::ContainerSource> sources = observe::StateDirContainers(o_.state_dir);
    for (observe::ContainerSource& c : observe::LocalRunContainers(o_.local_dir))
      sources.push_back(std::move(c));
    s.containers = observe::ReadContainers(sources);
    if (nvml_) {
      if (auto facts = nvml_->Discover(); facts.ok()) {
        for (const agent::GpuFacts& f : *facts)
          s.gpus.push_back({f.index, f.uuid, f.model, f.memory_bytes, true});
      }
      std::map<std::string, std::vector<agent::GpuProcess>> processes;
      std::set<std::string> uuids;
      for (const observe::ContainerRow& row : s.containers) uuids.insert(row.uuid);
      for (const std::string& uuid : uuids) {
        if (auto list = nvml_->Processes(uuid); list.ok()) processes[uuid] = std::move(*list);
      }
      const agent::DriftReport report = agent::CheckDrift(sources, processes, agent::ProcCgroupOf);
      for (observe::ContainerRow& row : s.containers) {
        for (const agent::ContainerDrift& d : report.containers) {
          if (processes.count(row.uuid) && d.pod == row.ns + "/" + row.pod &&
              d.container == row.container && d.uuid == row.uuid) {
            row.nvml_bytes = d.nvml_bytes;
          }
        }
      }
    }
    meter_.Update(s.containers, static_cast<std::uint64_t>(
                                    std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count()));
    return s;
  }

 private:
  const TopOptions& o_;
  std::unique_ptr<agent::NvmlGpuSource> nvml_;
  observe::ShareMeter meter_;
};

// A node's /metrics text is some kilobytes per container; past this it is not one.
constexpr std::size_t kMaxMetricsBytes = std::size_t{64} << 20;

StatusOr<observe::Snapshot> ReadFrom(const std::string& from) {
  std::string text;
  if (from == "-") {  // bounded like a file: `tessera top --from - < /dev/zero` must end
    char chunk[1 << 16];
    while (std::cin.read(chunk, sizeof(chunk)) || std::cin.gcount() > 0) {
      text.append(chunk, static_cast<std::size_t>(std::cin.gcount()));
      if (text.size() > kMaxMetricsBytes) {
        return InvalidInputError("--from -: standard input is larger than the limit of " +
                                 std::to_string(kMaxMetricsBytes) + " bytes");
      }
    }
  } else {
    auto file = ReadFile(from, kMaxMetricsBytes);
    if (!file.ok()) {
      return Status(file.status().code(), "--from: " + file.status().message() +
                                              " (a file of tessera-node /metrics text, or -)");
    }
    text = std::move(*file);
  }
  auto s = observe::SnapshotFromExposition(text);
  if (!s.ok()) return AsInputError(s.status().WithContext("--from " + from));
  return s;
}

}  // namespace

int TopCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
               const TopHooks& hooks) {
  auto options = ParseTopOptions(args);
  if (!options.ok()) {
    err << "tessera top: " << options.status().message() << "\n" << UsageOf("top") << "\n";
    return 2;
  }
  const TopOptions& o = *options;
  // A pipe is read once. A file or this machine are redrawn until Ctrl-C on a terminal, shown
  // once otherwise (as kubectl top does), unless --watch.
  const bool terminal = &out == &std::cout && isatty(STDOUT_FILENO);
  const bool once = o.once || o.json || o.from == "-" || (!terminal && !o.watch);
  auto stop = hooks.stop ? hooks.stop : [] { return g_interrupted != 0; };
  auto sleep = hooks.sleep ? hooks.sleep : [](int s) {
    for (int i = 0; i < s * 10 && g_interrupted == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  };
  if (!hooks.stop) std::signal(SIGINT, OnTopInterrupt);
  std::unique_ptr<LocalSource> local;
  if (o.from.empty()) {
    local = std::make_unique<LocalSource>(o);
    if (once) {
      local->Read();  // delivered shares need two readings a second apart
      sleep(1);
    }
  }
  const bool live = !once && terminal;
  while (true) {
    StatusOr<observe::Snapshot> s =
        local ? StatusOr<observe::Snapshot>(local->Read()) : ReadFrom(o.from);
    if (!s.ok()) {
      err << "tessera top: " << s.status().message() << "\n";
      return ToExitCode(s.status());
    }
    if (live) out << "\x1b[H\x1b[2J";
    out << (o.json ? observe::SnapshotJson(*s) : observe::RenderTop(*s, o.columns));
    out.flush();
    if (once) return 0;
    sleep(o.interval_s);
    if (stop()) return 0;
  }
}

}  // namespace tessera::cli
