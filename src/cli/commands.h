// The one list of `tessera`'s commands. Dispatch, `tessera help`, `--help`, shell completion and
// "did you mean" all read it, so a command cannot be reachable and undocumented, or the other way
// round.
#pragma once

#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::cli {

struct CommandInfo {
  std::string_view name;
  std::string_view summary;  // one line
  std::string_view usage;    // "usage: tessera NAME ..." (may span lines; no final newline)
  bool control_plane;        // only in builds with the control-plane dependencies
  bool own_help;             // its parser answers --help itself (richer than the usage line)
};

std::span<const CommandInfo> Commands();
const CommandInfo* FindCommand(std::string_view name);
// The usage of a command in the table; "" if there is none.
std::string_view UsageOf(std::string_view name);

// The conventions every invocation shares, before a command parses its own arguments:
//   tessera | tessera --help | -h | help [COMMAND]   the overview / a command's usage
//   tessera --version                                 the build (as `tessera version`)
//   tessera completion bash|zsh                       a completion script from the table
//   tessera COMMAND --help | -h                       the command's usage, to stdout, exit 0
//   tessera UNKNOWN                                   "unknown command", with a suggestion
// Returns the exit code, or -1 when `args` is for a command to run.
int RunMetaCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                   bool control_plane);

// `--flag=value` as `--flag`, `value`, up to a `--` (what follows it is not ours): one argument
// style for the commands that parse their own flags.
std::vector<std::string> SplitFlagValues(const std::vector<std::string>& args);

// `tessera version [--json]`.
int VersionCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace tessera::cli
