#include "cli/cli.h"

#include <memory>
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

namespace {

// One help layout for every command: the command table's usage first, then its summary (as the
// hand-parsed commands print them), then what CLI11 knows in detail (its options).
// (`explain pod` is the table's `explain`.)
class TableFormatter final : public CLI::Formatter {
 public:
  std::string make_description(const CLI::App* app) const override {
    return Command(app) != nullptr ? "" : CLI::Formatter::make_description(app);
  }
  std::string make_usage(const CLI::App* app, std::string name) const override {
    const CommandInfo* command = Command(app);
    if (command == nullptr) return CLI::Formatter::make_usage(app, std::move(name));
    return std::string(command->usage) + "\n\n" + std::string(command->summary) + "\n";
  }

 private:
  static const CommandInfo* Command(const CLI::App* app) {
    if (app->get_parent() == nullptr) return nullptr;  // `tessera` itself
    if (const CommandInfo* c = FindCommand(app->get_name())) return c;
    const CLI::App* parent = app->get_parent();
    return parent->get_parent() != nullptr ? FindCommand(parent->get_name()) : nullptr;
  }
};

}  // namespace

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
    const CommandInfo& sim = *FindCommand("sim");
    return sim::RunSimCommand({argv + 2, argv + argc}, out, err,
                              std::string(sim.usage) + "\n\n" + std::string(sim.summary) + "\n");
  }
  CLI::App app{"tessera: GPU sharing for Kubernetes that keeps the promises it schedules",
               "tessera"};
  app.formatter(std::make_shared<TableFormatter>());  // (before the subcommands: they copy it)
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
