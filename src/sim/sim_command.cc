#include "sim/sim_command.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "placement/policies.h"
#include "sim/go_source.h"
#include "sim/plot.h"
#include "sim/replay.h"
#include "sim/trace.h"

namespace tessera::sim {
namespace {

namespace fs = std::filesystem;
using placement::PolicyKind;

struct Options {
  std::string trace_dir;
  std::string pods;
  std::string nodes;
  std::vector<PolicyKind> policies;
  std::vector<std::int64_t> seeds;
  RngKind rng = RngKind::kGo;
  bool rng_given = false;
  bool json = false;
  std::string plot;
  unsigned jobs = 0;
  bool help = false;
};

std::string Quote(std::string_view s) { return "\"" + std::string(s) + "\""; }

constexpr std::int64_t kMaxSeeds = 100'000;

StatusOr<std::int64_t> ParseSeed(std::string_view text) {
  std::int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) {
    return InvalidArgumentError("--seeds: " + Quote(text) + " is not an integer");
  }
  return v;
}

// "42..51", "42", "42,45,50"
StatusOr<std::vector<std::int64_t>> ParseSeeds(std::string_view text) {
  std::vector<std::int64_t> seeds;
  if (const std::size_t dots = text.find(".."); dots != std::string_view::npos) {
    TESSERA_ASSIGN_OR_RETURN(const std::int64_t a, ParseSeed(text.substr(0, dots)));
    TESSERA_ASSIGN_OR_RETURN(const std::int64_t b, ParseSeed(text.substr(dots + 2)));
    if (b < a) {
      return InvalidArgumentError("--seeds: " + Quote(text) + ": want A..B with A <= B");
    }
    if (b - a >= kMaxSeeds) {
      return InvalidArgumentError("--seeds: " + Quote(text) + ": " + std::to_string(b - a + 1) +
                                  " seeds; at most " + std::to_string(kMaxSeeds));
    }
    for (std::int64_t s = a; s <= b; ++s) seeds.push_back(s);
    return seeds;
  }
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    TESSERA_ASSIGN_OR_RETURN(const std::int64_t s, ParseSeed(text.substr(start, comma - start)));
    seeds.push_back(s);
    start = comma + 1;
  }
  return seeds;
}

StatusOr<Options> ParseArgs(const std::vector<std::string>& args) {
  Options o;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i];
    std::optional<std::string> value;
    if (const std::size_t eq = flag.find('=');
        flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    }
    auto take = [&]() -> StatusOr<std::string> {
      if (value.has_value()) return *value;
      if (i + 1 >= args.size()) return InvalidArgumentError(flag + ": missing value");
      return args[++i];
    };
    if (flag == "-h" || flag == "--help") {
      o.help = true;
    } else if (flag == "--json") {
      o.json = true;
    } else if (flag == "--trace") {
      TESSERA_ASSIGN_OR_RETURN(o.trace_dir, take());
    } else if (flag == "--pods") {
      TESSERA_ASSIGN_OR_RETURN(o.pods, take());
    } else if (flag == "--nodes") {
      TESSERA_ASSIGN_OR_RETURN(o.nodes, take());
    } else if (flag == "--plot") {
      TESSERA_ASSIGN_OR_RETURN(o.plot, take());
    } else if (flag == "--policy" || flag == "--policies") {
      TESSERA_ASSIGN_OR_RETURN(const std::string list, take());
      std::size_t start = 0;
      while (start <= list.size()) {
        std::size_t comma = list.find(',', start);
        if (comma == std::string::npos) comma = list.size();
        const std::string name = list.substr(start, comma - start);
        if (name == "all") {
          for (int k = 0; k <= static_cast<int>(PolicyKind::kTessera); ++k) {
            o.policies.push_back(static_cast<PolicyKind>(k));
          }
        } else {
          TESSERA_ASSIGN_OR_RETURN(const PolicyKind kind, placement::ParsePolicyKind(name));
          o.policies.push_back(kind);
        }
        start = comma + 1;
      }
    } else if (flag == "--seeds" || flag == "--seed") {
      TESSERA_ASSIGN_OR_RETURN(const std::string text, take());
      TESSERA_ASSIGN_OR_RETURN(o.seeds, ParseSeeds(text));
    } else if (flag == "--rng") {
      TESSERA_ASSIGN_OR_RETURN(const std::string text, take());
      if (text == "go") {
        o.rng = RngKind::kGo;
      } else if (text == "std") {
        o.rng = RngKind::kStd;
      } else {
        return InvalidArgumentError("--rng: " + Quote(text) + "; accepted: go, std");
      }
      o.rng_given = true;
    } else if (flag == "--jobs" || flag == "-j") {
      TESSERA_ASSIGN_OR_RETURN(const std::string text, take());
      TESSERA_ASSIGN_OR_RETURN(const std::int64_t n, ParseSeed(text));
      if (n < 1 || n > 1024) return InvalidArgumentError("--jobs: want 1..1024");
      o.jobs = static_cast<unsigned>(n);
    } else {
      return InvalidArgumentError("unknown argument " + Quote(args[i]) +
                                  " (see tessera sim --help)");
    }
  }
  if (o.help) return o;
  if (o.trace_dir.empty() && (o.pods.empty() || o.nodes.empty())) {
    return InvalidArgumentError("--trace DIR is required (the folder of the node and pod CSVs)");
  }
  if (o.policies.empty()) {
    for (int k = 0; k <= static_cast<int>(PolicyKind::kFgd); ++k) {
      o.policies.push_back(static_cast<PolicyKind>(k));
    }
  }
  if (o.seeds.empty()) {
    for (std::int64_t s = 42; s <= 51; ++s) o.seeds.push_back(s);
  }
  if (!o.plot.empty()) {
    const std::string ext = fs::path(o.plot).extension().string();
    if (ext != ".svg") {
      return InvalidArgumentError("--plot: " + Quote(o.plot) +
                                  ": only SVG output is supported (name the file *.svg)");
    }
    // Fail now, not after the whole replay: the folder must exist and take a file.
    const fs::path folder =
        fs::path(o.plot).parent_path().empty() ? fs::path(".") : fs::path(o.plot).parent_path();
    std::error_code ec;
    if (!fs::is_directory(folder, ec) || access(folder.c_str(), W_OK) != 0) {
      return InvalidArgumentError("--plot: " + Quote(o.plot) + ": cannot write into " +
                                  Quote(folder.string()) + " (no such folder, or not writable)");
    }
  }
  return o;
}

// --pods FILE: a path, a file name in the trace folder, or a trace name ("default").
std::string ResolvePods(const Options& o) {
  const std::string pods = o.pods.empty() ? "default" : o.pods;
  if (fs::exists(pods)) return pods;
  const fs::path dir(o.trace_dir);
  if (fs::exists(dir / pods)) return (dir / pods).string();
  const fs::path named = dir / ("openb_pod_list_" + pods + ".csv");
  if (fs::exists(named)) return named.string();
  return pods;  // reported as not found by the loader
}

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::string Cell(const std::optional<double>& v, int digits) {
  return v.has_value() ? Fixed(*v, digits) : "-";
}

nlohmann::json CurveJson(const std::vector<std::optional<double>>& ys) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& y : ys) a.push_back(y.has_value() ? nlohmann::json(*y) : nlohmann::json());
  return a;
}

std::string Pad(std::string s, std::size_t width) {
  if (s.size() < width) s.insert(0, width - s.size(), ' ');
  return s;
}

}  // namespace

std::string SimHelp() {
  return "Replays an Alibaba GPU trace (cluster-trace-gpu-v2023 format) through placement\n"
         "policies as the FGD paper's simulator does (docs/sim.md).\n\n"
         "Options:\n"
         "  --trace DIR   folder with openb_node_list_gpu_node.csv (and the pod lists)\n"
         "  --nodes FILE  node list (default DIR/openb_node_list_gpu_node.csv)\n"
         "  --pods FILE   pod list: a path, a file in DIR, or a name such as \"default\"\n"
         "                (default DIR/openb_pod_list_default.csv)\n"
         "  --policy      " +
         placement::AcceptedPolicyNames() +
         ", or all (default all)\n"
         "  --seeds       A..B, N, or N,M,... (default 42..51)\n"
         "  --rng         go: Go math/rand compatible, reproduces the published runs (default\n"
         "                when built with Go); std: splitmix64\n"
         "  --json        one object per (policy, seed) run, as a JSON array\n"
         "  --plot FILE   SVG chart of mean allocation vs arrival for the chosen policies\n"
         "  --jobs N      parallel runs (default: the number of cores)\n";
}

int RunSimCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                  std::string_view usage) {
  StatusOr<Options> parsed = ParseArgs(args);
  if (!parsed.ok()) {
    err << "tessera sim: " << parsed.status().message() << "\n";
    return 2;
  }
  Options o = std::move(parsed).value();
  if (o.help) {
    out << usage << "\n" << SimHelp();
    return 0;
  }
  if (!o.rng_given && !GoSourceAvailable()) {
    o.rng = RngKind::kStd;
    err << "tessera sim: note: built without Go's math/rand table; using --rng std (results "
           "match the published curves statistically, not run for run)\n";
  }
  if (o.rng == RngKind::kGo && !GoSourceAvailable()) {
    err << "tessera sim: --rng go is unavailable: Go was not found when tessera was configured\n";
    return 1;
  }
  const std::string nodes_path =
      o.nodes.empty() ? (fs::path(o.trace_dir) / "openb_node_list_gpu_node.csv").string() : o.nodes;
  const std::string pods_path = ResolvePods(o);
  StatusOr<std::vector<placement::Node>> nodes = LoadNodeCsv(nodes_path);
  if (!nodes.ok()) {
    err << "tessera sim: " << nodes.status().message() << "\n";
    return ToExitCode(nodes.status());
  }
  StatusOr<std::vector<TracePod>> pods = LoadPodCsv(pods_path);
  if (!pods.ok()) {
    err << "tessera sim: " << pods.status().message() << "\n";
    return ToExitCode(pods.status());
  }
  const std::string workload = fs::path(pods_path).stem().string();
  StatusOr<SimInput> input =
      MakeSimInput(std::move(nodes).value(), std::move(pods).value(), workload);
  if (!input.ok()) {
    err << "tessera sim: " << input.status().message() << "\n";
    return ToExitCode(input.status());
  }

  struct Job {
    PolicyKind policy;
    std::int64_t seed;
  };
  std::vector<Job> jobs;
  for (const PolicyKind p : o.policies) {
    for (const std::int64_t s : o.seeds) jobs.push_back({p, s});
  }
  std::vector<std::optional<StatusOr<RunResult>>> results(jobs.size());
  const auto start = std::chrono::steady_clock::now();
  unsigned workers = o.jobs != 0 ? o.jobs : std::max(1U, std::thread::hardware_concurrency());
  workers = std::min<unsigned>(workers, static_cast<unsigned>(jobs.size()));
  std::atomic<std::size_t> next{0};
  RunOptions run_options;
  run_options.rng = o.rng;
  auto work = [&]() {
    for (std::size_t j = next++; j < jobs.size(); j = next++) {
      results[j] = RunExperiment(*input, jobs[j].policy, jobs[j].seed, run_options);
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 1; t < workers; ++t) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const auto& r : results) {
    if (!r->ok()) {
      err << "tessera sim: " << r->status().message() << "\n";
      return ToExitCode(r->status());
    }
  }

  const std::string rng_name = o.rng == RngKind::kGo ? "go" : "std";
  if (o.json) {
    nlohmann::json all = nlohmann::json::array();
    for (std::size_t j = 0; j < jobs.size(); ++j) {
      const RunResult& r = results[j]->value();
      nlohmann::json obj;
      obj["workload"] = input->workload;
      obj["policy"] = std::string(placement::Name(r.policy));
      obj["sc_policy"] = std::string(placement::PublishedName(r.policy));
      obj["seed"] = r.seed;
      obj["rng"] = rng_name;
      obj["tune"] = run_options.workload.tune;
      obj["gpu_alloc_ratio"] = r.curve.alloc.back().has_value()
                                   ? nlohmann::json(*r.curve.alloc.back())
                                   : nlohmann::json();
      obj["frag_ratio"] =
          r.curve.frag.back().has_value() ? nlohmann::json(*r.curve.frag.back()) : nlohmann::json();
      obj["unallocated_gpus"] = r.unallocated_gpus;
      obj["failed_pods"] = r.failed_pods;
      obj["pods"] = r.pods;
      obj["arrived_milli"] = r.arrived_milli;
      obj["allocated_milli"] = r.used_milli;
      obj["total_gpus"] = input->cluster.total_gpus();
      obj["seconds"] = r.seconds;
      obj["curve"] = {{"arrival", nlohmann::json::array()},
                      {"alloc", CurveJson(r.curve.alloc)},
                      {"frag", CurveJson(r.curve.frag)},
                      {"frag_ratio", CurveJson(r.curve.frag_ratio)}};
      for (std::size_t x = 0; x < r.curve.alloc.size(); ++x) obj["curve"]["arrival"].push_back(x);
      all.push_back(std::move(obj));
    }
    out << all.dump() << "\n";
  } else {
    out << "trace " << input->workload << ": " << input->cluster.size() << " nodes, "
        << input->cluster.total_gpus() << " GPUs, " << input->pods.size() << " pods; rng "
        << rng_name << "; " << jobs.size() << " runs on " << workers << " threads in "
        << Fixed(wall, 2) << " s\n";
    for (const PolicyKind p : o.policies) {
      out << "\n" << placement::Name(p) << " (" << placement::PublishedName(p) << ")\n";
      out << "  seed  alloc@130%  unalloc GPUs  frag@130%  failed pods  seconds\n";
      double sum_alloc = 0, sum_unalloc = 0, sum_frag = 0, sum_failed = 0, sum_sec = 0;
      int n = 0;
      for (std::size_t j = 0; j < jobs.size(); ++j) {
        if (jobs[j].policy != p) continue;
        const RunResult& r = results[j]->value();
        out << Pad(std::to_string(r.seed), 6) << Pad(Cell(r.curve.alloc.back(), 2), 12)
            << Pad(Fixed(r.unallocated_gpus, 1), 14) << Pad(Cell(r.curve.frag.back(), 2), 11)
            << Pad(std::to_string(r.failed_pods), 13) << Pad(Fixed(r.seconds, 2), 9) << "\n";
        sum_alloc += r.curve.alloc.back().value_or(NAN);
        sum_frag += r.curve.frag.back().value_or(NAN);
        sum_unalloc += r.unallocated_gpus;
        sum_failed += static_cast<double>(r.failed_pods);
        sum_sec += r.seconds;
        ++n;
      }
      if (n > 1) {
        const double d = n;
        out << Pad("mean", 6) << Pad(Fixed(sum_alloc / d, 2), 12)
            << Pad(Fixed(sum_unalloc / d, 1), 14) << Pad(Fixed(sum_frag / d, 2), 11)
            << Pad(Fixed(sum_failed / d, 1), 13) << Pad(Fixed(sum_sec / d, 2), 9) << "\n";
      }
    }
  }

  if (!o.plot.empty()) {
    std::vector<PlotSeries> series;
    for (const PolicyKind p : o.policies) {
      PlotSeries s;
      s.label = std::string(placement::Name(p));
      std::vector<double> sum;
      std::vector<int> count;
      for (std::size_t j = 0; j < jobs.size(); ++j) {
        if (jobs[j].policy != p) continue;
        const Curve& c = results[j]->value().curve;
        sum.resize(c.alloc.size(), 0.0);
        count.resize(c.alloc.size(), 0);
        for (std::size_t x = 0; x < c.alloc.size(); ++x) {
          if (c.alloc[x].has_value()) {
            sum[x] += *c.alloc[x];
            ++count[x];
          }
        }
      }
      for (std::size_t x = 0; x < sum.size(); ++x) {
        s.y.push_back(count[x] > 0 ? std::optional<double>(sum[x] / count[x]) : std::nullopt);
      }
      series.push_back(std::move(s));
    }
    std::ofstream file(o.plot);
    file << PlotSvg(series, "GPU allocation vs arrival: " + input->workload + " (" +
                                std::to_string(o.seeds.size()) + " seeds)");
    if (!file) {
      err << "tessera sim: --plot: cannot write " << Quote(o.plot) << "\n";
      return 1;
    }
  }
  return 0;
}

}  // namespace tessera::sim
