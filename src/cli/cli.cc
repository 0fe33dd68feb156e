#include "cli/cli.h"

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/advise_cmd.h"
#include "cli/core_commands.h"
#include "cli/demo_cmd.h"
#include "cli/explain_cmd.h"
#include "policy/policy.h"
#include "sim/sim_command.h"

namespace tessera::cli {

int Run(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  // Dependency-free subcommands first (`run` takes everything after `--` verbatim).
  if (const int code = RunCoreCommand({argv + 1, argv + argc}, out, err, policy::LoadPolicyFile);
      code >= 0) {
    return code;
  }
  // `sim` parses its own arguments (tessera::sim::RunSimCommand).
  if (argc >= 2 && std::string(argv[1]) == "sim") {
    return sim::RunSimCommand({argv + 2, argv + argc}, out, err);
  }
  CLI::App app{"tessera: GPU sharing for Kubernetes that keeps the promises it schedules"};
  app.require_subcommand(1);
  int exit_code = 0;
  AddAdviseCommand(app, out, err, &exit_code);
  AddExplainCommand(app, out, err, &exit_code);
  AddDemoCommand(app, out, err, &exit_code);

  app.add_subcommand("run", "Run a command under a GPU memory cap on a local GPU");
  app.add_subcommand("version", "Print the version and the shared-region ABI");
  app.add_subcommand("names", "List every resource, annotation, label, env var and path");
  app.add_subcommand("inventory",
                     "Print this machine's GPU inventory as tessera-node publishes it (NVML)");
  app.add_subcommand("drift",
                     "Compare NVML with containers' regions and caps (tessera drift DIR...)");
  app.add_subcommand(
      "top", "Live view per GPU and container: memory vs cap, compute share, holds, denials");
  app.add_subcommand("doctor", "Measure what each sharing mode really isolates on this node's GPU");
  app.add_subcommand("sim", "Replay a GPU trace through placement policies (tessera sim --help)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e, out, err);
    return code == 0 ? 0 : 2;
  }
  return exit_code;
}

}  // namespace tessera::cli
