#include "cli/cli.h"

#include <CLI/CLI.hpp>

#include "cli/advise_cmd.h"
#include "tessera/names.h"

namespace tessera::cli {

int ToExitCode(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return 0;
    case StatusCode::kInvalidArgument:
      return 2;
    case StatusCode::kNotFound:
      return 3;
    default:
      return 1;
  }
}

int Run(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app{"tessera: GPU sharing for Kubernetes that keeps the promises it schedules"};
  app.require_subcommand(1);
  int exit_code = 0;
  AddAdviseCommand(app, out, err, &exit_code);

  app.add_subcommand("version", "Print the version")->callback([&out] {
    out << "tessera " << TESSERA_VERSION << "\n";
  });
  app.add_subcommand("names", "List every resource, annotation, label, env var and path")
      ->callback([&out] {
        for (const auto& n : names::kAllNames) {
          out << n.kind << "\t" << n.value << "\t" << n.description << "\n";
        }
      });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e, out, err);
    return code == 0 ? 0 : 2;
  }
  return exit_code;
}

}  // namespace tessera::cli
