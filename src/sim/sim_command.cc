#include "sim/sim_command.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "tessera/file.h"

#include "placement/policies.h"
#include "sim/go_source.h"
#include "sim/plot.h"
#include "sim/replay.h"
#include "sim/scale.h"
#include "sim/trace.h"
#include "sim/variants.h"

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
  bool keep_order = false;  // --order name
  std::string variants;     // --variants RECIPE: write the recipe's pod lists, no replay
  std::string out_dir;      // --out DIR (with --variants)
  int scale = 1;            // --scale K: the node list copied K times, each pod list with it
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
    } else if (flag == "--order") {
      TESSERA_ASSIGN_OR_RETURN(const std::string text, take());
      if (text == "shuffle") {
        o.keep_order = false;
      } else if (text == "name") {
        o.keep_order = true;
      } else {
        return InvalidArgumentError("--order: " + Quote(text) + "; accepted: shuffle, name");
      }
    } else if (flag == "--variants") {
      TESSERA_ASSIGN_OR_RETURN(o.variants, take());
      if (o.variants.empty()) return InvalidArgumentError("--variants: want a recipe file");
    } else if (flag == "--out") {
      TESSERA_ASSIGN_OR_RETURN(o.out_dir, take());
      if (o.out_dir.empty()) return InvalidArgumentError("--out: want a folder");
    } else if (flag == "--scale") {
      TESSERA_ASSIGN_OR_RETURN(const std::string text, take());
      TESSERA_ASSIGN_OR_RETURN(o.scale, ParseScale(text));
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
  if (!o.variants.empty() || !o.out_dir.empty()) {
    if (o.variants.empty() || o.out_dir.empty()) {
      return InvalidArgumentError(
          "--variants RECIPE and --out DIR go together (write the recipe's pod lists into DIR)");
    }
    if (o.trace_dir.empty()) {
      return InvalidArgumentError(
          "--variants: --trace DIR is required (the lists it derives from)");
    }
    if (!o.pods.empty() || !o.policies.empty() || !o.plot.empty() || o.json || o.scale != 1) {
      return InvalidArgumentError(
          "--variants writes pod lists and replays nothing: drop --pods, --policy, --plot, "
          "--json and --scale");
    }
    return o;
  }
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

// The pod lists published with the trace (alibaba/clusterdata, kUpstreamFolder): a user who
// lacks one is told where it is. The trace folder holds any subset of them (and other lists).
constexpr std::string_view kUpstreamFolder = "alibaba/clusterdata, cluster-trace-gpu-v2023/csv/";
constexpr std::string_view kPublishedPodLists[] = {
    "cpu0",       "cpu037",     "cpu050",      "cpu072",     "cpu100",     "cpu200",
    "cpu235",     "cpu250",     "cpu300",      "default",    "gpushare20", "gpushare40",
    "gpushare60", "gpushare80", "gpushare100", "gpuspec05",  "gpuspec10",  "gpuspec20",
    "gpuspec25",  "gpuspec33",  "multigpu20",  "multigpu30", "multigpu40", "multigpu50"};
constexpr std::string_view kPodListPrefix = "openb_pod_list_";

std::string PublishedPlace(std::string_view file) {
  return "published in " + std::string(kUpstreamFolder) + std::string(file);
}

// --pods FILE: a path, a file name in the trace folder, or a list's name ("default").
StatusOr<std::string> ResolvePods(const Options& o, const std::string& wanted) {
  const std::string pods = wanted.empty() ? "default" : wanted;
  std::error_code ec;
  if (fs::exists(pods, ec)) return pods;
  const fs::path dir(o.trace_dir);
  if (fs::exists(dir / pods, ec)) return (dir / pods).string();
  const std::string file = std::string(kPodListPrefix) + pods + ".csv";
  if (fs::exists(dir / file, ec)) return (dir / file).string();
  // Not here: name where it is published, if it is one of the trace's lists.
  std::string name = fs::path(pods).stem().string();
  if (name.starts_with(kPodListPrefix)) name = name.substr(kPodListPrefix.size());
  for (const std::string_view known : kPublishedPodLists) {
    if (name == known) {
      const std::string known_file = std::string(kPodListPrefix) + name + ".csv";
      return NotFoundError("--pods " + Quote(pods) + ": no such file, nor " +
                           Quote((dir / known_file).string()) + "; that list is " +
                           PublishedPlace(known_file) + " (put it in " + Quote(o.trace_dir) + ")");
    }
  }
  std::string known;
  for (const std::string_view k : kPublishedPodLists)
    known += (known.empty() ? "" : ", ") + std::string(k);
  return NotFoundError("--pods " + Quote(pods) + ": no such file, nor " +
                       Quote((dir / pods).string()) + " or " + Quote((dir / file).string()) +
                       "; the trace's lists are " + known + " (" +
                       PublishedPlace(std::string(kPodListPrefix) + "NAME.csv") + ")");
}

// --pods all: every pod list in the trace folder, by name.
std::vector<std::string> PodListsIn(const std::string& trace_dir) {
  std::vector<std::string> lists;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(trace_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with(kPodListPrefix) && name.ends_with(".csv") && entry.is_regular_file(ec))
      lists.push_back(entry.path().string());
  }
  std::sort(lists.begin(), lists.end());
  return lists;
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

struct Job {
  PolicyKind policy;
  std::int64_t seed;
};

// One pod list replayed under every chosen policy and seed.
struct ListRun {
  SimInput input;
  std::vector<Job> jobs;
  std::vector<RunResult> results;  // one per job
  unsigned workers = 1;
  double wall_s = 0;
};

StatusOr<ListRun> ReplayList(const Options& o, const std::vector<placement::Node>& nodes,
                             const std::string& pods_path, std::ostream& err) {
  TESSERA_ASSIGN_OR_RETURN(std::vector<TracePod> pods, LoadPodCsv(pods_path));
  // Pods no node can take fail in every run: say which and why, once, before the replay.
  for (const std::string& line : UnplaceablePods(pods, nodes, pods_path)) {
    err << "tessera sim: note: " << line << " (counted as failed)\n";
  }
  if (o.scale > 1) {
    StatusOr<std::vector<TracePod>> scaled = ScalePods(pods, o.scale);
    if (!scaled.ok()) return AsInputError(scaled.status());  // a name the list already has
    pods = std::move(scaled).value();
  }
  const std::string workload = fs::path(pods_path).stem().string();
  TESSERA_ASSIGN_OR_RETURN(SimInput input, MakeSimInput(nodes, std::move(pods), workload));
  ListRun run{std::move(input), {}, {}, 1, 0};
  for (const PolicyKind p : o.policies) {
    for (const std::int64_t seed : o.seeds) run.jobs.push_back({p, seed});
  }
  std::vector<std::optional<StatusOr<RunResult>>> results(run.jobs.size());
  const auto start = std::chrono::steady_clock::now();
  unsigned workers = o.jobs != 0 ? o.jobs : std::max(1U, std::thread::hardware_concurrency());
  workers = std::min<unsigned>(workers, static_cast<unsigned>(run.jobs.size()));
  std::atomic<std::size_t> next{0};
  RunOptions run_options;
  run_options.rng = o.rng;
  run_options.workload.shuffle = !o.keep_order;
  auto work = [&]() {
    for (std::size_t j = next++; j < run.jobs.size(); j = next++) {
      results[j] = RunExperiment(run.input, run.jobs[j].policy, run.jobs[j].seed, run_options);
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 1; t < workers; ++t) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  run.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.workers = workers;
  for (auto& r : results) {
    if (!r->ok()) return r->status();
    run.results.push_back(std::move(*r).value());
  }
  return run;
}

std::string RngName(const Options& o) { return o.rng == RngKind::kGo ? "go" : "std"; }

std::vector<nlohmann::json> RunsJson(const Options& o, const ListRun& run) {
  std::vector<nlohmann::json> objects;
  const RunOptions run_options;
  for (const RunResult& r : run.results) {
    nlohmann::json obj;
    obj["workload"] = run.input.workload;
    obj["policy"] = std::string(placement::Name(r.policy));
    obj["sc_policy"] = std::string(placement::PublishedName(r.policy));
    obj["seed"] = r.seed;
    obj["rng"] = RngName(o);
    obj["tune"] = run_options.workload.tune;
    obj["order"] = o.keep_order ? "name" : "shuffle";
    obj["scale"] = o.scale;
    obj["nodes"] = run.input.cluster.size();
    obj["gpu_alloc_ratio"] =
        r.curve.alloc.back().has_value() ? nlohmann::json(*r.curve.alloc.back()) : nlohmann::json();
    obj["frag_ratio"] =
        r.curve.frag.back().has_value() ? nlohmann::json(*r.curve.frag.back()) : nlohmann::json();
    obj["unallocated_gpus"] = r.unallocated_gpus;
    obj["failed_pods"] = r.failed_pods;
    obj["pods"] = r.pods;
    obj["arrived_milli"] = r.arrived_milli;
    obj["allocated_milli"] = r.used_milli;
    obj["total_gpus"] = run.input.cluster.total_gpus();
    obj["seconds"] = r.seconds;
    obj["curve"] = {{"arrival", nlohmann::json::array()},
                    {"alloc", CurveJson(r.curve.alloc)},
                    {"frag", CurveJson(r.curve.frag)},
                    {"frag_ratio", CurveJson(r.curve.frag_ratio)}};
    for (std::size_t x = 0; x < r.curve.alloc.size(); ++x) obj["curve"]["arrival"].push_back(x);
    objects.push_back(std::move(obj));
  }
  return objects;
}

std::string ListText(const Options& o, const ListRun& run) {
  std::ostringstream out;
  out << "trace " << run.input.workload << ": " << run.input.cluster.size() << " nodes, "
      << run.input.cluster.total_gpus() << " GPUs, " << run.input.pods.size() << " pods"
      << (o.scale > 1 ? " (--scale " + std::to_string(o.scale) + ")" : "") << "; rng " << RngName(o)
      << "; " << run.jobs.size() << " runs on " << run.workers << " threads in "
      << Fixed(run.wall_s, 2) << " s\n";
  for (const PolicyKind p : o.policies) {
    out << "\n" << placement::Name(p) << " (" << placement::PublishedName(p) << ")\n";
    out << "  seed  alloc@130%  unalloc GPUs  frag@130%  failed pods  seconds\n";
    double sum_alloc = 0, sum_unalloc = 0, sum_frag = 0, sum_failed = 0, sum_sec = 0;
    int n = 0;
    for (const RunResult& r : run.results) {
      if (r.policy != p) continue;
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
  return out.str();
}

// A policy's allocation at 130 % arrival per seed.
std::map<std::int64_t, double> AllocBySeed(const ListRun& run, PolicyKind p) {
  std::map<std::int64_t, double> by_seed;
  for (const RunResult& r : run.results) {
    if (r.policy == p) by_seed[r.seed] = r.curve.alloc.back().value_or(NAN);
  }
  return by_seed;
}

double Mean(const std::map<std::int64_t, double>& values) {
  double sum = 0;
  for (const auto& [seed, v] : values) sum += v;
  return values.empty() ? NAN : sum / static_cast<double>(values.size());
}

// --pods all: one row per list, the mean allocation at 130 % arrival of every policy, and
// tessera against each baseline: the difference of the means and the seeds it won (paired).
std::string Summary(const Options& o, const std::vector<ListRun>& runs) {
  std::ostringstream out;
  const bool has_tessera =
      std::find(o.policies.begin(), o.policies.end(), PolicyKind::kTessera) != o.policies.end();
  out << "mean GPU allocation at 130 % arrival, " << o.seeds.size() << " seed(s), rng "
      << RngName(o) << "\n";
  out << "list                ";
  for (const PolicyKind p : o.policies) out << Pad(std::string(placement::Name(p)), 16);
  if (has_tessera) {
    for (const PolicyKind p : o.policies) {
      if (p != PolicyKind::kTessera) out << Pad("vs " + std::string(placement::Name(p)), 18);
    }
  }
  out << "\n";
  for (const ListRun& run : runs) {
    std::string name = run.input.workload.substr(
        run.input.workload.starts_with(kPodListPrefix) ? kPodListPrefix.size() : 0);
    name.resize(std::max<std::size_t>(name.size(), 20), ' ');
    out << name;
    for (const PolicyKind p : o.policies) out << Pad(Fixed(Mean(AllocBySeed(run, p)), 2), 16);
    if (has_tessera) {
      const auto mine = AllocBySeed(run, PolicyKind::kTessera);
      for (const PolicyKind p : o.policies) {
        if (p == PolicyKind::kTessera) continue;
        const auto theirs = AllocBySeed(run, p);
        int wins = 0, pairs = 0;
        for (const auto& [seed, v] : mine) {
          const auto other = theirs.find(seed);
          if (other == theirs.end()) continue;
          ++pairs;
          wins += v > other->second ? 1 : 0;
        }
        const double delta = Mean(mine) - Mean(theirs);
        out << Pad((delta >= 0 ? "+" : "") + Fixed(delta, 2) + " " + std::to_string(wins) + "/" +
                       std::to_string(pairs),
                   18);
      }
    }
    out << "\n";
  }
  if (has_tessera)
    out << "(vs P: tessera's mean minus P's, and the seeds tessera won of the pairs)\n";
  return out.str();
}

Status WritePlot(const Options& o, const ListRun& run, const std::string& path) {
  std::vector<PlotSeries> series;
  for (const PolicyKind p : o.policies) {
    PlotSeries s;
    s.label = std::string(placement::Name(p));
    std::vector<double> sum;
    std::vector<int> count;
    for (const RunResult& r : run.results) {
      if (r.policy != p) continue;
      const Curve& c = r.curve;
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
  std::ofstream file(path);
  file << PlotSvg(series, "GPU allocation vs arrival: " + run.input.workload + " (" +
                              std::to_string(o.seeds.size()) + " seeds)");
  if (!file) return UnavailableError("--plot: cannot write " + Quote(path));
  return Status::Ok();
}

// --variants RECIPE --out DIR: every variant of the recipe, derived from the trace folder's lists,
// written as DIR/<set>[-by-name]/openb_pod_list_<name>.csv beside a copy of the node list.
int WriteVariants(const Options& o, const std::vector<placement::Node>& nodes,
                  const std::string& nodes_path, std::ostream& out, std::ostream& err) {
  StatusOr<std::string> text = ReadFile(o.variants);
  if (!text.ok()) {
    err << "tessera sim: --variants: " << text.status().message() << "\n";
    return ToExitCode(text.status());
  }
  StatusOr<std::vector<VariantSpec>> specs = ParseRecipe(*text, o.variants);
  if (!specs.ok()) {
    err << "tessera sim: " << specs.status().message() << "\n";
    return ToExitCode(specs.status());
  }
  std::int64_t capacity = 0;
  for (const placement::Node& n : nodes) {
    capacity += static_cast<std::int64_t>(n.gpus.size()) * placement::kMilliPerGpu;
  }
  std::map<std::string, std::vector<TracePod>> bases;
  out << "variant              family    base        set       pods  multi-GPU share  folder\n";
  for (const VariantSpec& spec : *specs) {
    if (!bases.contains(spec.base)) {
      StatusOr<std::string> path = ResolvePods(o, spec.base);
      if (!path.ok()) {
        err << "tessera sim: variant " << Quote(spec.name) << ": " << path.status().message()
            << "\n";
        return ToExitCode(path.status());
      }
      StatusOr<std::vector<TracePod>> pods = LoadPodCsv(*path);
      if (!pods.ok()) {
        err << "tessera sim: " << pods.status().message() << "\n";
        return ToExitCode(pods.status());
      }
      bases[spec.base] = std::move(*pods);
    }
    StatusOr<std::vector<TracePod>> pods = MakeVariant(spec, bases[spec.base], capacity);
    if (!pods.ok()) {
      err << "tessera sim: " << pods.status().message() << "\n";
      return ToExitCode(pods.status());
    }
    const std::string set = spec.held_out ? "held-out" : "tuning";
    const fs::path folder = fs::path(o.out_dir) / (spec.ordered() ? set + "-by-name" : set);
    std::error_code ec;
    fs::create_directories(folder, ec);
    const fs::path node_copy = folder / "openb_node_list_gpu_node.csv";
    if (!ec) fs::copy_file(nodes_path, node_copy, fs::copy_options::overwrite_existing, ec);
    const fs::path file = folder / (std::string(kPodListPrefix) + spec.name + ".csv");
    std::ofstream csv(file, std::ios::binary | std::ios::trunc);
    csv << PodCsv(*pods);
    csv.close();
    if (ec || !csv) {
      err << "tessera sim: --out: cannot write " << Quote(file.string())
          << (ec ? " (" + ec.message() + ")" : "") << "\n";
      return 5;
    }
    std::string name = spec.name;
    name.resize(std::max<std::size_t>(name.size(), 20), ' ');
    std::string family(Name(spec.family));
    family.resize(10, ' ');
    std::string base = spec.base;
    base.resize(std::max<std::size_t>(base.size(), 12), ' ');
    std::string set_cell = set;
    set_cell.resize(9, ' ');
    out << name << " " << family << base << set_cell << Pad(std::to_string(pods->size()), 6)
        << Pad(Fixed(MultiGpuShare(*pods), 3), 17) << "  " << folder.string() << "\n";
  }
  return 0;
}

}  // namespace

std::string SimHelp() {
  return "Replays an Alibaba GPU trace (cluster-trace-gpu-v2023 format) through placement\n"
         "policies as the FGD paper's simulator does (docs/sim.md).\n\n"
         "Options:\n"
         "  --trace DIR   folder with openb_node_list_gpu_node.csv (and the pod lists)\n"
         "  --nodes FILE  node list (default DIR/openb_node_list_gpu_node.csv)\n"
         "  --pods FILE   pod list: a path, a file in DIR, or a name such as \"default\"\n"
         "                (default DIR/openb_pod_list_default.csv); all: every\n"
         "                DIR/openb_pod_list_*.csv, with one summary table of tessera against\n"
         "                each baseline (--plot FILE then writes FILE-<list>.svg per list)\n"
         "  --policy      " +
         placement::AcceptedPolicyNames() +
         ", or all (default all)\n"
         "  --seeds       A..B, N, or N,M,... (default 42..51)\n"
         "  --rng         go: Go math/rand compatible, reproduces the published runs (default\n"
         "                when built with Go); std: splitmix64\n"
         "  --json        one object per (policy, seed) run, as a JSON array\n"
         "  --plot FILE   SVG chart of mean allocation vs arrival for the chosen policies\n"
         "  --jobs N      parallel runs (default: the number of cores)\n"
         "  --scale K     K times the cluster: the node list copied K times (copy J's names\n"
         "                end in -cJ), every pod of each list with it; K in 1..100 (default 1)\n"
         "  --order       shuffle: pods arrive shuffled, as published (default); name: in name\n"
         "                order (lists whose names follow time, e.g. --variants' shift family)\n"
         "  --variants RECIPE --out DIR\n"
         "                write the recipe's pod lists (derived from the lists in --trace DIR)\n"
         "                into DIR/<set>/ (DIR/<set>-by-name/ for lists to replay with --order\n"
         "                name), each folder with the node list; replays nothing\n";
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
  StatusOr<std::vector<placement::Node>> nodes = LoadNodeCsv(nodes_path);
  if (!nodes.ok()) {
    err << "tessera sim: " << nodes.status().message();
    if (nodes.status().code() == StatusCode::kNotFound && o.nodes.empty()) {
      err << " (the node list is " << PublishedPlace("openb_node_list_gpu_node.csv") << ")";
    }
    err << "\n";
    return ToExitCode(nodes.status());
  }
  if (!o.variants.empty()) return WriteVariants(o, *nodes, nodes_path, out, err);
  if (o.scale > 1) {
    StatusOr<std::vector<placement::Node>> scaled = ScaleNodes(*nodes, o.scale);
    if (!scaled.ok()) {
      err << "tessera sim: " << scaled.status().message() << "\n";
      return ToExitCode(AsInputError(scaled.status()));
    }
    nodes = std::move(scaled);
  }
  std::vector<std::string> lists;
  if (o.pods == "all") {
    lists = PodListsIn(o.trace_dir);
    if (lists.empty()) {
      err << "tessera sim: --pods all: no " << kPodListPrefix << "*.csv in " << Quote(o.trace_dir)
          << "; the trace's lists are " << PublishedPlace(std::string(kPodListPrefix) + "*.csv")
          << "\n";
      return 3;
    }
  } else {
    StatusOr<std::string> pods_path = ResolvePods(o, o.pods);
    if (!pods_path.ok()) {
      err << "tessera sim: " << pods_path.status().message() << "\n";
      return ToExitCode(pods_path.status());
    }
    lists.push_back(*pods_path);
  }
  std::vector<ListRun> runs;
  for (const std::string& list : lists) {
    StatusOr<ListRun> run = ReplayList(o, *nodes, list, err);
    if (!run.ok()) {
      err << "tessera sim: " << run.status().message() << "\n";
      return ToExitCode(run.status());
    }
    runs.push_back(std::move(*run));
  }
  if (o.json) {
    nlohmann::json all = nlohmann::json::array();
    for (const ListRun& run : runs) {
      for (nlohmann::json& obj : RunsJson(o, run)) all.push_back(std::move(obj));
    }
    out << all.dump() << "\n";
  } else if (o.pods == "all") {
    out << Summary(o, runs);
  } else {
    out << ListText(o, runs.front());
  }
  if (!o.plot.empty()) {
    for (const ListRun& run : runs) {
      // One chart per list; with --pods all, FILE-<list>.svg beside FILE.
      std::string path = o.plot;
      if (o.pods == "all") {
        const fs::path plot(o.plot);
        path = (plot.parent_path() /
                (plot.stem().string() + "-" + run.input.workload + plot.extension().string()))
                   .string();
      }
      if (Status st = WritePlot(o, run, path); !st.ok()) {
        err << "tessera sim: " << st.message() << "\n";
        return ToExitCode(st);
      }
    }
  }
  return 0;
}

}  // namespace tessera::sim
