#include "cli/commands.h"

#include <sstream>

#include <gtest/gtest.h>

#include "cli/core_commands.h"

namespace tessera::cli {
namespace {

struct Result {
  int code;
  std::string out, err;
};

// The conventions first, then the dependency-free commands: what `tessera` does in any build.
Result Tessera(std::vector<std::string> args, bool control_plane = true) {
  std::ostringstream out, err;
  int code = RunMetaCommand(args, out, err, control_plane);
  if (code < 0) code = RunCoreCommand(args, out, err);
  return {code, out.str(), err.str()};
}

TEST(Commands, FlagEqualsValueIsSplitUpToTheSeparator) {
  EXPECT_EQ(SplitFlagValues({"--from=/x", "--once", "--a=b=c", "-f=x", "--=y", "--", "--c=d"}),
            (std::vector<std::string>{"--from", "/x", "--once", "--a", "b=c", "-f=x", "--=y", "--",
                                      "--c=d"}));
  // The hand-parsed commands take both styles: the same missing file either way.
  std::ostringstream out, err;
  EXPECT_EQ(RunCoreCommand({"top", "--once", "--from=/nonexistent/metrics"}, out, err), 3)
      << err.str();
  EXPECT_NE(err.str().find("/nonexistent/metrics"), std::string::npos) << err.str();
}

TEST(Commands, EveryCommandAnswersHelpWithItsUsageOnStdout) {
  for (const CommandInfo& c : Commands()) {
    ASSERT_TRUE(c.usage.starts_with("usage: tessera " + std::string(c.name))) << c.name;
    std::ostringstream out, err;
    const int code = RunMetaCommand({std::string(c.name), "--help"}, out, err, true);
    if (c.own_help) {
      EXPECT_EQ(code, -1) << c.name;  // its own parser answers (cli_test checks those)
      continue;
    }
    if (c.name == "help" || c.name == "completion") continue;  // "--help" is their argument
    EXPECT_EQ(code, 0) << c.name << ": " << err.str();
    EXPECT_EQ(out.str(), std::string(c.usage) + "\n\n" + std::string(c.summary) + "\n");
    EXPECT_TRUE(err.str().empty()) << err.str();
  }
  // -h too, and `help NAME`; for run, only before the command's own arguments.
  EXPECT_EQ(Tessera({"top", "-h"}).code, 0);
  EXPECT_EQ(Tessera({"help", "run"}).out,
            std::string(UsageOf("run")) + "\n\n" + std::string(FindCommand("run")->summary) + "\n");
  EXPECT_EQ(Tessera({"help", "bogus"}).code, 2);
  std::ostringstream out, err;
  EXPECT_EQ(
      RunMetaCommand({"run", "--gpu-memory", "1Gi", "--", "python3", "--help"}, out, err, true),
      -1);
}

TEST(Commands, TheOverviewListsEveryCommandTheBuildHas) {
  for (const bool control_plane : {true, false}) {
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"--help"}, {"help"}, {"-h"}}) {
      const Result r = Tessera(args, control_plane);
      EXPECT_EQ(r.code, 0);
      for (const CommandInfo& c : Commands()) {
        const bool listed = r.out.find("\n  " + std::string(c.name) + " ") != std::string::npos;
        EXPECT_EQ(listed, control_plane || !c.control_plane) << c.name << "\n" << r.out;
      }
    }
    const Result none = Tessera({}, control_plane);  // no command: the overview, as an error
    EXPECT_EQ(none.code, 2);
    EXPECT_NE(none.err.find("usage: tessera COMMAND"), std::string::npos) << none.err;
  }
  const Result missing = Tessera({"explain", "pod", "a/b"}, /*control_plane=*/false);
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("not in this build"), std::string::npos) << missing.err;
}

TEST(Commands, AnUnknownCommandIsRefusedWithASuggestion) {
  const std::pair<const char*, const char*> cases[] = {
      {"tpo", "did you mean \"top\"?"},
      {"explian", "did you mean \"explain\"?"},
      {"versoin", "did you mean \"version\"?"},
      {"inv", "did you mean \"inventory\"?"},
  };
  for (const auto& [typo, says] : cases) {
    const Result r = Tessera({typo});
    EXPECT_EQ(r.code, 2) << typo;
    EXPECT_NE(r.err.find("unknown command \"" + std::string(typo) + "\""), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
  }
  const Result far = Tessera({"kubernetes"});
  EXPECT_EQ(far.code, 2);
  EXPECT_EQ(far.err.find("did you mean"), std::string::npos) << far.err;
  EXPECT_NE(Tessera({"--bogus"}).err.find("unknown flag \"--bogus\""), std::string::npos);
}

TEST(Commands, VersionSaysTheBuild) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--version"}, {"version"}}) {
    const Result r = Tessera(args);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(r.out.starts_with("tessera " TESSERA_VERSION " (commit ")) << r.out;
    EXPECT_NE(r.out.find("CUDA headers "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(" build)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("shared-region ABI "), std::string::npos) << r.out;
  }
  const Result json = Tessera({"version", "--json"});
  EXPECT_EQ(json.code, 0);
  for (const char* field :
       {"\"version\":", "\"commit\":", "\"cudaHeaders\":", "\"buildType\":", "\"regionAbi\":"}) {
    EXPECT_NE(json.out.find(field), std::string::npos) << json.out;
  }
  EXPECT_EQ(Tessera({"version", "--yaml"}).code, 2);
}

TEST(Commands, CompletionComesFromTheTable) {
  for (const char* shell : {"bash", "zsh"}) {
    const Result r = Tessera({"completion", shell});
    EXPECT_EQ(r.code, 0) << r.err;
    for (const CommandInfo& c : Commands()) {
      EXPECT_NE(r.out.find(std::string(c.name)), std::string::npos) << shell << ": " << c.name;
    }
    for (const char* flag : {"--gpu-memory", "--gpu-cores", "--fail-closed", "--interval-s"}) {
      EXPECT_NE(r.out.find(flag), std::string::npos) << shell << ": " << flag;
    }
  }
  EXPECT_NE(Tessera({"completion", "bash"}).out.find("complete -o default -F _tessera tessera"),
            std::string::npos);
  EXPECT_TRUE(Tessera({"completion", "zsh"}).out.starts_with("#compdef tessera"));
  const Result fish = Tessera({"completion", "fish"});
  EXPECT_EQ(fish.code, 2);
  EXPECT_NE(fish.err.find("expected bash or zsh"), std::string::npos) << fish.err;
}

TEST(Commands, NamesAsJson) {
  const Result r = Tessera({"names", "--json"});
  EXPECT_EQ(r.code, 0);
  EXPECT_TRUE(r.out.starts_with("[{\"kind\":")) << r.out.substr(0, 80);
  EXPECT_NE(r.out.find("\"name\":\"tessera.dev/gpu-memory\""), std::string::npos);
  EXPECT_EQ(Tessera({"names", "--xml"}).code, 2);
}

}  // namespace
}  // namespace tessera::cli
