#include "cli/commands.h"

#include <algorithm>
#include <array>
#include <set>

#include "tessera/build_info.h"
#include "tessera/json_writer.h"
#include "tessera/region.h"

namespace tessera::cli {
namespace {

constexpr std::array kCommands = {
    CommandInfo{"advise",
                "Recommend GPU sharing modes for a trust tier; with --policy alone, validate and "
                "explain a policy file",
                "usage: tessera advise --trust team|department|customer|regulated [--gpu MODEL] "
                "[--workloads LIST]\n"
                "                      [--vgpu-licensed] [--policy FILE] [--json]",
                true, true},
    CommandInfo{"explain", "Why a pod is where it is, Pending, or denied",
                "usage: tessera explain pod NAMESPACE/NAME [--kubeconfig FILE] [--scheduler URL] "
                "[--policy FILE] [--json]\n"
                "       tessera explain pod -f FILE [--scheduler URL] [--policy FILE] [--json]",
                true, true},
    CommandInfo{"demo",
                "Replay the seeds' GPU-sharing scenarios on a local control plane with simulated "
                "GPU nodes (docs/demo.md)",
                "usage: tessera demo [--testcluster BIN] [--scheduler-binary BIN] "
                "[--node-binary BIN] [--fake-nvml-dir DIR]\n"
                "                    [--only SCENARIO,...] [--json] [--keep]\n"
                "       tessera demo --real-node KUBECONFIG --pod-template FILE "
                "[--only SCENARIO,...]",
                true, true},
    CommandInfo{"run", "Run a command under a GPU memory cap, compute share and priority",
                "usage: tessera run [--gpu-memory QUANTITY] [--gpu-cores 1-100] "
                "[--compute hard|work-conserving]\n"
                "                   [--compute-window MS] "
                "[--priority latency-critical|normal|best-effort] [--mode shared|mps]\n"
                "                   [--mps-lc-reserve 0-90] [--gpu UUID|INDEX[,UUID|INDEX...]] "
                "[--context-bytes auto|QUANTITY]\n"
                "                   [--fail-closed] [--keep] [--hook-library PATH] -- CMD ARGS...\n"
                "(at least one of --gpu-memory, --gpu-cores, --priority, --mode; "
                "each flag also as --gpu-memory=4Gi)",
                false, false},
    CommandInfo{"top",
                "Live view per GPU and container: memory vs cap, compute share, holds, denials",
                "usage: tessera top [--once | --watch | --json] [--interval-s N (1-3600)] "
                "[--columns N (60-400)]\n"
                "                   [--state-dir DIR] [--local-dir DIR] [--nvml-library LIB] "
                "[--from FILE|-]",
                false, false},
    CommandInfo{"doctor", "Measure what each sharing mode really isolates on this node's GPU",
                "usage: tessera doctor [--gpu INDEX|UUID] [--modes native,shared,mps] [--json] "
                "[--json-file FILE]\n"
                "                      [--policy FILE] [--keep]",
                false, false},
    CommandInfo{"inventory",
                "Print this machine's GPU inventory as tessera-node publishes it (NVML)",
                "usage: tessera inventory [--gpus all|UUID,...|INDEX,...] [--node-name NAME]",
                false, false},
    CommandInfo{"drift", "Compare NVML with containers' regions and caps",
                "usage: tessera drift [--json] [--watch-compute SECONDS] [--hook-library PATH] "
                "DIR...\n"
                "                     (each DIR holding a limits file and a region; PATH: the "
                "preload library,\n"
                "                     found beside the binary by default)",
                false, false},
    CommandInfo{"sim", "Replay a GPU trace through placement policies",
                "usage: tessera sim --trace DIR [--pods FILE|NAME|all] [--policy P[,P...]] "
                "[--seeds A..B]\n"
                "                   [--rng go|std] [--json] [--plot FILE.svg] [--jobs N]",
                true, true},
    CommandInfo{"names", "List every resource, annotation, label, env var and path",
                "usage: tessera names", false, false},
    CommandInfo{"version", "Print the version, the build and the shared-region ABI",
                "usage: tessera version [--json]   (also: tessera --version)", false, false},
    CommandInfo{"completion", "Print a shell completion script",
                "usage: tessera completion bash|zsh\n"
                "  bash: source <(tessera completion bash)\n"
                "  zsh:  tessera completion zsh > \"${fpath[1]}/_tessera\"",
                false, false},
    CommandInfo{"help", "Show the commands, or one command's usage",
                "usage: tessera help [COMMAND]", false, false},
};

bool IsHelpFlag(std::string_view a) { return a == "--help" || a == "-h"; }

void Overview(std::ostream& os, bool control_plane) {
  os << "tessera: GPU sharing for Kubernetes that keeps the promises it schedules\n\n"
     << "usage: tessera COMMAND [ARGS...]   (tessera COMMAND --help for its usage)\n\n"
     << "commands:\n";
  for (const CommandInfo& c : kCommands) {
    if (c.control_plane && !control_plane) continue;
    os << "  " << c.name << std::string(12 - std::min<std::size_t>(c.name.size(), 11), ' ')
       << c.summary << "\n";
  }
  os << "\nflags: --help, --version\n";
}

std::size_t Distance(std::string_view a, std::string_view b) {  // Levenshtein
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// The flags a command's usage names ("--gpu-memory", ...), for completion.
std::vector<std::string> FlagsOf(std::string_view usage) {
  std::set<std::string> flags;
  for (std::size_t at = usage.find("--"); at != std::string_view::npos;
       at = usage.find("--", at + 2)) {
    std::size_t end = at + 2;
    while (end < usage.size() &&
           (std::isalnum(static_cast<unsigned char>(usage[end])) != 0 || usage[end] == '-'))
      ++end;
    if (end > at + 2) flags.insert(std::string(usage.substr(at, end - at)));
  }
  return {flags.begin(), flags.end()};
}

std::string Join(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

std::string CommandNames(bool control_plane) {
  std::vector<std::string> names;
  for (const CommandInfo& c : kCommands) {
    if (!c.control_plane || control_plane) names.emplace_back(c.name);
  }
  return Join(names);
}

// What to complete after `tessera NAME`: its flags, the commands after `help`, the shells after
// `completion`.
std::string WordsAfter(const CommandInfo& c, const std::string& commands) {
  if (c.name == "help") return commands;
  if (c.name == "completion") return "bash zsh";
  return Join(FlagsOf(c.usage)) + " --help";
}

int Completion(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
               bool control_plane) {
  const std::string shell = args.size() == 2 ? args[1] : "";
  if (shell != "bash" && shell != "zsh") {
    err << "tessera completion: expected bash or zsh\n" << UsageOf("completion") << "\n";
    return 2;
  }
  const std::string commands = CommandNames(control_plane);
  if (shell == "bash") {
    out << "# tessera completion for bash: source <(tessera completion bash)\n"
        << "_tessera() {\n"
        << "  local cur=${COMP_WORDS[COMP_CWORD]}\n"
        << "  if [ \"$COMP_CWORD\" -eq 1 ]; then\n"
        << "    COMPREPLY=($(compgen -W \"" << commands << " --help --version\" -- \"$cur\"))\n"
        << "    return\n"
        << "  fi\n"
        << "  case ${COMP_WORDS[1]} in\n";
    for (const CommandInfo& c : kCommands) {
      if (c.control_plane && !control_plane) continue;
      out << "    " << c.name << ") COMPREPLY=($(compgen -W \"" << WordsAfter(c, commands)
          << "\" -- \"$cur\")) ;;\n";
    }
    out << "  esac\n"
        << "}\n"
        << "complete -o default -F _tessera tessera\n";
    return 0;
  }
  out << "#compdef tessera\n"
      << "# tessera completion for zsh: tessera completion zsh > \"${fpath[1]}/_tessera\"\n"
      << "_tessera() {\n"
      << "  if (( CURRENT == 2 )); then\n"
      << "    compadd -- " << commands << " --help --version\n"
      << "    return\n"
      << "  fi\n"
      << "  case $words[2] in\n";
  for (const CommandInfo& c : kCommands) {
    if (c.control_plane && !control_plane) continue;
    out << "    " << c.name << ") compadd -- " << WordsAfter(c, commands) << "; _files ;;\n";
  }
  out << "  esac\n"
      << "}\n"
      << "_tessera \"$@\"\n";
  return 0;
}

}  // namespace

std::span<const CommandInfo> Commands() { return kCommands; }

const CommandInfo* FindCommand(std::string_view name) {
  for (const CommandInfo& c : kCommands) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

std::string_view UsageOf(std::string_view name) {
  const CommandInfo* c = FindCommand(name);
  return c != nullptr ? c->usage : std::string_view();
}

std::vector<std::string> SplitFlagValues(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  bool ours = true;
  for (const std::string& a : args) {
    if (a == "--") ours = false;
    const std::size_t eq = a.find('=');
    if (ours && a.starts_with("--") && eq != std::string::npos && eq > 2) {
      out.push_back(a.substr(0, eq));
      out.push_back(a.substr(eq + 1));
    } else {
      out.push_back(a);
    }
  }
  return out;
}

int VersionCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const bool json = args.size() == 1 && args[0] == "--json";
  if (!args.empty() && !json) {
    err << "tessera version: unexpected \"" << args[0] << "\"\n" << UsageOf("version") << "\n";
    return 2;
  }
  const BuildInfo b = GetBuildInfo();
  if (json) {
    std::string text;
    {
      ObjectWriter o(text);
      o.Str("version", b.version);
      o.Str("commit", b.commit);
      o.Str("cudaHeaders", b.cuda_headers);
      o.Str("buildType", b.build_type);
      o.Str("regionAbi", shm::AbiVersion());
    }
    out << text << "\n";
  } else {
    out << VersionLine("tessera") << "; shared-region ABI " << shm::AbiVersion() << "\n";
  }
  return 0;
}

int RunMetaCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                   bool control_plane) {
  if (args.empty()) {
    Overview(err, control_plane);
    return 2;
  }
  const std::string& first = args[0];
  if (IsHelpFlag(first) || first == "help") {
    if (first == "help" && args.size() == 2) {
      const CommandInfo* c = FindCommand(args[1]);
      if (c == nullptr || (c->control_plane && !control_plane)) {
        err << "tessera help: unknown command \"" << args[1] << "\"\n";
        return 2;
      }
      out << c->usage << "\n\n" << c->summary << "\n";
      return 0;
    }
    if (args.size() > (first == "help" ? 2u : 1u)) {
      err << "tessera: " << UsageOf("help") << "\n";
      return 2;
    }
    Overview(out, control_plane);
    return 0;
  }
  if (first == "--version") {
    return VersionCommand(std::vector<std::string>(args.begin() + 1, args.end()), out, err);
  }
  if (first == "completion") return Completion(args, out, err, control_plane);
  if (first == "doctor-worker") return -1;  // internal: doctor's own tenants
  const CommandInfo* c = FindCommand(first);
  if (c == nullptr) {
    err << "tessera: unknown " << (first.starts_with("-") ? "flag" : "command") << " \"" << first
        << "\"";
    const CommandInfo* best = nullptr;
    std::size_t best_distance = 3;  // suggest within two edits
    for (const CommandInfo& k : kCommands) {
      if (k.control_plane && !control_plane) continue;
      const std::size_t d = Distance(first, k.name);
      if (d < best_distance ||
          (k.name.starts_with(first) && first.size() >= 2 && best == nullptr)) {
        best = &k;
        best_distance = std::min(d, best_distance);
      }
    }
    if (best != nullptr) err << "; did you mean \"" << best->name << "\"?";
    err << "\nrun \"tessera help\" for the list of commands\n";
    return 2;
  }
  if (c->control_plane && !control_plane) {
    err << "tessera " << c->name
        << ": not in this build (built without the control-plane dependencies); available: "
        << CommandNames(false) << "\n";
    return 2;
  }
  if (!c->own_help) {
    for (std::size_t i = 1; i < args.size() && args[i] != "--"; ++i) {
      if (IsHelpFlag(args[i])) {
        out << c->usage << "\n\n" << c->summary << "\n";
        return 0;
      }
    }
  }
  return -1;
}

}  // namespace tessera::cli
