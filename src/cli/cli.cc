#include "cli/cli.h"

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/advise_cmd.h"
#include "cli/commands.h"
#include "cli/core_commands.h"
#include "cli/demo_cmd.h"
#include "cli/explain_cmd.h"
#include "policy/policy.h"
#include "sim/sim_command.h"

namespace tessera::cli {

int Run(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  // Help, --version, completion and unknown commands, from the one command table.
  if (const int code = RunMetaCommand({argv + 1, argv + argc}, out, err, /*control_plane=*/true);
      code >= 0) {
    return code;
  }
  // Dependency-free subcommands first (`run` takes everything after `--` verbatim).
  if (const int code = RunCoreCommand({argv + 1, argv + argc}, out, err, policy::LoadPolicyFile);
      code >= 0) {
    return code;
  }
  // `sim` parses its own arguments (tessera::sim::RunSimCommand).
  if (argc >= 2 && std::string(argv[1]) == "sim") {
    return sim::RunSimCommand({argv + 2, argv + argc}, out, err);
  }
  CLI::App app{"tessera: GPU sharing for Kubernetes that keeps the promises it schedules",
               "tessera"};
  app.require_subcommand(1);
  int exit_code = 0;
  AddAdviseCommand(app, out, err, &exit_code);
  AddExplainCommand(app, out, err, &exit_code);
  AddDemoCommand(app, out, err, &exit_code);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e, out, err);
    return code == 0 ? 0 : 2;
  }
  return exit_code;
}

}  // namespace tessera::cli
