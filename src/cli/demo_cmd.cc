#include "cli/demo_cmd.h"

#include <filesystem>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

#include "tessera/quantity.h"

#include "cli/cli.h"
#include "demo/demo.h"

namespace tessera::cli {
namespace {

struct DemoFlags {
  demo::DemoOptions options;
  std::string only;
  bool json = false;
  std::string real_node;     // a kubeconfig: the showdown on that cluster's real node
  std::string pod_template;  // with --real-node
  CLI::Option* real_node_option = nullptr;
};

// The folder of the running tessera binary ("" if /proc does not say).
std::string ExecutableDir() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : exe.parent_path().string();
}

// The exit status of a run (both modes): what failed, then the pods that did not end as told.
int ExitCode(const Status& status, int unexpected, std::string_view what, std::ostream& err) {
  if (status.code() == StatusCode::kInvalidArgument || status.code() == StatusCode::kInvalidInput) {
    err << "tessera demo: " << status.message() << "\n";
    return ToExitCode(status);
  }
  if (status.code() == StatusCode::kAborted) return 130;  // Ctrl-C, as a shell reports it
  if (!status.ok()) return ToExitCode(status);
  if (unexpected > 0) {
    err << "tessera demo: " << unexpected << " " << what << " (marked (!) above)\n";
    return 1;
  }
  return 0;
}

// --real-node: the showdown as real containers on an existing cluster (demo.h).
int RunRealNode(const DemoFlags& f, std::ostream& out, std::ostream& err) {
  const demo::DemoOptions& o = f.options;
  if (f.real_node_option->count() == 0) {
    err << "tessera demo: --pod-template applies only with --real-node KUBECONFIG\n";
    return 2;
  }
  if (f.real_node.empty()) {
    err << "tessera demo: --real-node: expected the path of a kubeconfig file\n";
    return 2;
  }
  const char* local_only = !o.testcluster.empty()     ? "--testcluster"
                           : !o.scheduler.empty()     ? "--scheduler-binary"
                           : !o.node.empty()          ? "--node-binary"
                           : !o.fake_nvml_dir.empty() ? "--fake-nvml-dir"
                           : o.keep                   ? "--keep"
                           : f.json                   ? "--json"
                                                      : nullptr;
  if (local_only != nullptr) {
    err << "tessera demo: " << local_only
        << " applies to the local cluster the demo starts, not to --real-node\n";
    return 2;
  }
  if (f.pod_template.empty()) {
    err << "tessera demo: --pod-template: required with --real-node (a JSON file: {\"image\": "
           "...})\n";
    return 2;
  }
  demo::RealNodeOptions r;
  r.kubeconfig = f.real_node;
  r.pod_template = f.pod_template;
  r.only = o.only;
  demo::RealNodeResult result;
  const Status status = demo::RunRealNodeDemo(r, &out, err, &result);
  return ExitCode(status, result.unexpected(), "placed pod(s) were not refused at their own cap",
                  err);
}

int RunDemoCommand(DemoFlags& f, std::ostream& out, std::ostream& err) {
  demo::DemoOptions& o = f.options;
  if (!f.only.empty()) {
    std::size_t start = 0;
    while (start <= f.only.size()) {
      std::size_t comma = f.only.find(',', start);
      if (comma == std::string::npos) comma = f.only.size();
      const std::string id = f.only.substr(start, comma - start);
      if (id.empty()) {
        err << "tessera demo: --only: an empty entry in \"" << QuoteForMessage(f.only)
            << "\"; accepted: scenario ids, comma-separated (" << demo::ScenarioIds() << ")\n";
        return 2;
      }
      o.only.push_back(id);
      start = comma + 1;
    }
  }
  if (f.real_node_option->count() > 0 || !f.pod_template.empty()) return RunRealNode(f, out, err);
  demo::FillDefaults(o, ExecutableDir());
  demo::DemoResult result;
  const Status status = demo::RunDemo(o, f.json ? nullptr : &out, err, &result);
  if (f.json && (status.ok() || result.completed)) out << demo::ResultToJson(result) << "\n";
  return ExitCode(status, result.unexpected(), "pod(s) did not end as the story says", err);
}

}  // namespace

void AddDemoCommand(CLI::App& app, std::ostream& out, std::ostream& err, int* exit_code) {
  auto flags = std::make_shared<DemoFlags>();
  CLI::App* cmd = app.add_subcommand(
      "demo",
      "Replay the seeds' GPU-sharing scenarios on a local control plane with simulated "
      "GPU nodes, and show placements, ledgers, denials and enforcement (docs/demo.md)");
  cmd->add_option("--testcluster", flags->options.testcluster,
                  "tessera-testcluster (test/e2e/harness/build.sh; default $TESSERA_TESTCLUSTER, "
                  "else found from this binary)");
  cmd->add_option("--scheduler-binary", flags->options.scheduler,
                  "tessera-scheduler (default: found from this binary)");
  cmd->add_option("--node-binary", flags->options.node,
                  "tessera-node (default: found from this binary)");
  cmd->add_option("--fake-nvml-dir", flags->options.fake_nvml_dir,
                  "folder of the fake libnvidia-ml.so.1 (default: found from this binary)");
  cmd->add_option("--only", flags->only,
                  "scenarios to run, comma-separated: " + demo::ScenarioIds());
  cmd->add_flag("--json", flags->json, "print a machine-readable summary instead of the story");
  flags->real_node_option = cmd->add_option(
      "--real-node", flags->real_node,
      "KUBECONFIG of a cluster with tessera installed on a real node: the showdown's pods as "
      "real containers there, each process filling its memory cap");
  cmd->add_option("--pod-template", flags->pod_template,
                  "with --real-node: a JSON file {\"image\": an image holding the CUDA client, "
                  "\"client\", \"schedulerName\", \"env\", \"volumes\", \"volumeMounts\"}");
  cmd->add_flag("--keep", flags->options.keep,
                "keep the temporary folder (process logs, cluster state) and say where");
  cmd->callback([flags, &out, &err, exit_code] { *exit_code = RunDemoCommand(*flags, out, err); });
}

}  // namespace tessera::cli
