#include "tessera/subprocess.h"

#include <algorithm>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <poll.h>
#include <signal.h>
#include <sstream>
#include <stdlib.h>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "tessera/exec_args.h"

#include "testutil/status_matchers.h"
#include "testutil/temp_dir.h"

namespace tessera {
namespace {

SpawnOptions Program(std::vector<std::string> argv) {
  SpawnOptions o;
  o.argv = std::move(argv);
  return o;
}

SpawnOptions Shell(const std::string& script) { return Program({"/bin/sh", "-c", script}); }

// Spawns, waits, and returns the wait status (-1 on any error, which fails the test).
int RunToEnd(const SpawnOptions& o) {
  StatusOr<pid_t> pid = Spawn(o);
  EXPECT_OK(pid);
  if (!pid.ok()) return -1;
  StatusOr<int> status = Wait(*pid);
  EXPECT_OK(status);
  return status.ok() ? *status : -1;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A pipe whose ends close on destruction.
struct Pipe {
  int read = -1, write = -1;
  Pipe() {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) == 0) {
      read = fds[0];
      write = fds[1];
    }
  }
  ~Pipe() {
    CloseRead();
    CloseWrite();
  }
  void CloseRead() {
    if (read >= 0) close(read);
    read = -1;
  }
  void CloseWrite() {
    if (write >= 0) close(write);
    write = -1;
  }
  // Reads until end of file (every writer gone) or 60 s without a byte; false on the latter.
  bool ReadToEnd(std::string* out) {
    for (;;) {
      pollfd p{read, POLLIN, 0};
      if (poll(&p, 1, 60000) <= 0) return false;
      char buffer[256];
      const ssize_t n = ::read(read, buffer, sizeof(buffer));
      if (n <= 0) return n == 0;
      out->append(buffer, static_cast<std::size_t>(n));
    }
  }
  // Reads until `text` has arrived; false at end of file first.
  bool ReadUntil(const std::string& text, std::string* out) {
    while (out->find(text) == std::string::npos) {
      pollfd p{read, POLLIN, 0};
      if (poll(&p, 1, 60000) <= 0) return false;
      char c = 0;
      if (::read(read, &c, 1) != 1) return false;
      out->push_back(c);
    }
    return true;
  }
};

TEST(Spawn, ReportsTheExitCode) {
  const int status = RunToEnd(Shell("exit 3"));
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3);
  EXPECT_EQ(DescribeWaitStatus(status), "exit code 3");
  EXPECT_EQ(DescribeWaitStatus(RunToEnd(Shell("exit 0"))), "exit code 0");
}

TEST(Spawn, PassesArgvAsGiven) {
  SpawnOptions o = Shell("test \"$0\" = 'a b' && test \"$1\" = '' && test $# = 1");
  o.argv.insert(o.argv.end(), {"a b", ""});
  EXPECT_EQ(DescribeWaitStatus(RunToEnd(o)), "exit code 0");
}

TEST(Spawn, InheritsTheEnvironmentAndAddsOrReplaces) {
  ASSERT_EQ(setenv("TESSERA_SPAWN_TEST_KEPT", "kept", 1), 0);
  ASSERT_EQ(setenv("TESSERA_SPAWN_TEST_REPLACED", "old", 1), 0);
  SpawnOptions o = Shell(
      "test \"$TESSERA_SPAWN_TEST_KEPT\" = kept && test \"$TESSERA_SPAWN_TEST_REPLACED\" = new && "
      "test \"$TESSERA_SPAWN_TEST_ADDED\" = 'x=y'");
  o.env = {"TESSERA_SPAWN_TEST_REPLACED=new", "TESSERA_SPAWN_TEST_ADDED=x=y"};
  EXPECT_EQ(DescribeWaitStatus(RunToEnd(o)), "exit code 0");
  // Without the additions the check fails: it is the child's environment that is tested.
  o.env.clear();
  EXPECT_EQ(DescribeWaitStatus(RunToEnd(o)), "exit code 1");
}

TEST(Spawn, ReplacesTheEnvironmentExactly) {
  ASSERT_EQ(setenv("TESSERA_SPAWN_TEST_KEPT", "kept", 1), 0);
  SpawnOptions o = Shell("test -z \"${TESSERA_SPAWN_TEST_KEPT+set}\" && test \"$ONLY\" = this");
  o.env_mode = SpawnOptions::Env::kReplace;
  o.env = {"ONLY=this"};
  EXPECT_EQ(DescribeWaitStatus(RunToEnd(o)), "exit code 0");
  o.env_mode = SpawnOptions::Env::kInherit;
  EXPECT_EQ(DescribeWaitStatus(RunToEnd(o)), "exit code 1");
}

TEST(Spawn, AppendsStdoutAndStderrToOneLog) {
  testutil::TempDir dir;
  const std::string log = dir.path() + "/child.log";
  SpawnOptions o = Shell("echo out; echo err >&2");
  o.stdout_to = Redirect::AppendTo(log);
  o.stderr_to = Redirect::AppendTo(log);
  EXPECT_EQ(DescribeWaitStatus(RunToEnd(o)), "exit code 0");
  EXPECT_EQ(ReadAll(log), "out\nerr\n");
  EXPECT_EQ(DescribeWaitStatus(RunToEnd(o)), "exit code 0");
  EXPECT_EQ(ReadAll(log), "out\nerr\nout\nerr\n");
  EXPECT_EQ(TailOfFile(log, 1), "err\n");
  EXPECT_EQ(static_cast<int>(std::filesystem::status(log).permissions() &
                             std::filesystem::perms::owner_write),
            static_cast<int>(std::filesystem::perms::owner_write));
}

TEST(Spawn, SeparatesStreamsAndDiscardsToDevNull) {
  testutil::TempDir dir;
  const std::string out = dir.path() + "/out.log";
  SpawnOptions o = Shell("echo out; echo err >&2");
  o.stdout_to = Redirect::AppendTo(out);
  o.stderr_to = Redirect::Null();
  EXPECT_EQ(DescribeWaitStatus(RunToEnd(o)), "exit code 0");
  EXPECT_EQ(ReadAll(out), "out\n");
}

TEST(Spawn, ConnectsDescriptorsToTheStandardStreams) {
  Pipe in, out;
  SpawnOptions o = Shell("read line; echo \"got $line\"");
  o.stdin_to = Redirect::Fd(in.read);
  o.stdout_to = Redirect::Fd(out.write);
  StatusOr<pid_t> pid = Spawn(o);
  ASSERT_OK(pid);
  in.CloseRead();
  out.CloseWrite();
  ASSERT_EQ(write(in.write, "hello\n", 6), 6);
  in.CloseWrite();
  std::string text;
  EXPECT_TRUE(out.ReadToEnd(&text));
  EXPECT_EQ(text, "got hello\n");
  StatusOr<int> status = Wait(*pid);
  ASSERT_OK(status);
  EXPECT_EQ(DescribeWaitStatus(*status), "exit code 0");
}

TEST(Spawn, NullStdinReadsEndOfFile) {
  SpawnOptions o = Shell("if read line; then exit 1; else exit 0; fi");
  o.stdin_to = Redirect::Null();
  EXPECT_EQ(DescribeWaitStatus(RunToEnd(o)), "exit code 0");
}

TEST(Spawn, ReportsAProgramThatCannotRun) {
  StatusOr<pid_t> missing = Spawn(Program({"/nonexistent/tessera-program", "x"}));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(),
            "cannot run \"/nonexistent/tessera-program\": No such file or directory");

  testutil::TempDir dir;
  const std::string script = dir.path() + "/not-executable";
  std::ofstream(script) << "#!/bin/sh\nexit 0\n";
  chmod(script.c_str(), 0644);
  StatusOr<pid_t> denied = Spawn(Program({script}));  // no x bit: not even root may run it
  ASSERT_FALSE(denied.ok());
  EXPECT_EQ(denied.status().code(), StatusCode::kPermissionDenied) << denied.status().message();
  EXPECT_NE(denied.status().message().find("cannot run \"" + script + "\": "), std::string::npos)
      << denied.status().message();

  EXPECT_EQ(Spawn({}).status().code(), StatusCode::kInvalidArgument);
}

TEST(Spawn, SearchesPathOnlyWhenAsked) {
  SpawnOptions o;
  o.argv = {"sh", "-c", "exit 4"};
  o.search_path = true;
  EXPECT_EQ(DescribeWaitStatus(RunToEnd(o)), "exit code 4");
  o.search_path = false;  // "sh" is then a path relative to the working directory
  testutil::TempDir dir;
  o.working_directory = dir.path();
  StatusOr<pid_t> relative = Spawn(o);
  ASSERT_FALSE(relative.ok());
  EXPECT_EQ(relative.status().code(), StatusCode::kNotFound);

  SpawnOptions none;
  none.argv = {"tessera-no-such-program-anywhere"};
  none.search_path = true;
  StatusOr<pid_t> pid = Spawn(none);
  ASSERT_FALSE(pid.ok());
  EXPECT_EQ(pid.status().message(),
            "cannot run \"tessera-no-such-program-anywhere\": No such file or directory");
}

TEST(Spawn, ReportsAnUnopenableLog) {
  SpawnOptions o = Shell("exit 0");
  o.stdout_to = Redirect::AppendTo("/nonexistent/dir/child.log");
  StatusOr<pid_t> pid = Spawn(o);
  ASSERT_FALSE(pid.ok());
  EXPECT_EQ(pid.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(pid.status().message().rfind("open /nonexistent/dir/child.log: ", 0), 0U)
      << pid.status().message();
}

TEST(Spawn, RunsInTheWorkingDirectory) {
  testutil::TempDir dir;
  const std::string real = std::filesystem::canonical(dir.path()).string();
  SpawnOptions o = Shell("test \"$(pwd -P)\" = '" + real + "'");
  o.working_directory = dir.path();
  EXPECT_EQ(DescribeWaitStatus(RunToEnd(o)), "exit code 0");
  o.working_directory = dir.path() + "/missing";
  StatusOr<pid_t> pid = Spawn(o);
  ASSERT_FALSE(pid.ok());
  EXPECT_NE(pid.status().message().find("chdir " + o.working_directory + ": "), std::string::npos)
      << pid.status().message();
}

TEST(Spawn, NewProcessGroupAndSession) {
  Pipe in;
  SpawnOptions o = Shell("read line");
  o.stdin_to = Redirect::Fd(in.read);
  StatusOr<pid_t> same = Spawn(o);
  ASSERT_OK(same);
  EXPECT_EQ(getpgid(*same), getpgrp());
  o.new_process_group = true;
  StatusOr<pid_t> group = Spawn(o);
  ASSERT_OK(group);
  EXPECT_EQ(getpgid(*group), *group);  // holds once Spawn returns
  o.new_process_group = false;
  o.new_session = true;
  StatusOr<pid_t> session = Spawn(o);
  ASSERT_OK(session);
  in.CloseWrite();  // each child's `read` ends, then the child
  in.CloseRead();
  for (pid_t pid : {*same, *group, *session}) {
    StatusOr<int> status = Wait(pid);
    ASSERT_OK(status);
    EXPECT_EQ(DescribeWaitStatus(*status), "exit code 1");  // read at end of file
  }
  // The session leader's own check, once it has run: its session is its pid.
  SpawnOptions check = Shell("test \"$(cut -d' ' -f6 /proc/$$/stat)\" = $$");
  check.new_session = true;
  EXPECT_EQ(DescribeWaitStatus(RunToEnd(check)), "exit code 0");
  check.new_session = false;
  EXPECT_EQ(DescribeWaitStatus(RunToEnd(check)), "exit code 1");
}

TEST(Spawn, TryWaitSeesTheChildRunThenEnd) {
  Pipe in;
  SpawnOptions o = Shell("read line; exit 5");
  o.stdin_to = Redirect::Fd(in.read);
  StatusOr<pid_t> pid = Spawn(o);
  ASSERT_OK(pid);
  EXPECT_FALSE(TryWait(*pid).has_value());  // blocked on its stdin
  in.CloseWrite();
  StatusOr<int> status = Wait(*pid);
  ASSERT_OK(status);
  EXPECT_EQ(DescribeWaitStatus(*status), "exit code 5");
  EXPECT_EQ(TryWait(*pid), -1);  // reaped: no longer our child
  EXPECT_FALSE(Wait(*pid).ok());
}

TEST(Spawn, TerminateSendsSigtermFirst) {
  SpawnOptions o;
  o.argv = {"/bin/sleep", "1000"};
  StatusOr<pid_t> pid = Spawn(o);
  ASSERT_OK(pid);
  const Termination t = Terminate(*pid, std::chrono::minutes(5));
  EXPECT_FALSE(t.killed);
  EXPECT_EQ(DescribeWaitStatus(t.status), "signal 15");
  EXPECT_EQ(TryWait(*pid), -1);  // reaped
}

TEST(Spawn, TerminateKillsTheGroupOfAChildThatIgnoresSigterm) {
  Pipe out;
  // The shell and its background sleep ignore SIGTERM; both hold the pipe's write end.
  SpawnOptions o = Shell("trap '' TERM; /bin/sleep 1000 & echo ready; wait");
  o.stdout_to = Redirect::Fd(out.write);
  o.new_process_group = true;
  StatusOr<pid_t> pid = Spawn(o);
  ASSERT_OK(pid);
  out.CloseWrite();
  std::string text;
  ASSERT_TRUE(out.ReadUntil("ready\n", &text)) << text;
  const Termination t = Terminate(*pid, std::chrono::milliseconds(0), /*group=*/true);
  EXPECT_TRUE(t.killed);
  EXPECT_EQ(DescribeWaitStatus(t.status), "signal 9");
  EXPECT_TRUE(out.ReadToEnd(&text));  // end of file: the sleep is gone as well
}

// Signals: ignored ones stay ignored unless named; the mask is inherited unless cleared.
TEST(Spawn, SignalDispositionsAndMask) {
  struct sigaction ignore {
  }, previous{};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR1, &ignore, &previous), 0);
  SpawnOptions o = Shell("kill -USR1 $$; exit 0");
  EXPECT_EQ(DescribeWaitStatus(RunToEnd(o)), "exit code 0");
  o.default_signals = {SIGUSR1};
  EXPECT_EQ(DescribeWaitStatus(RunToEnd(o)), "signal " + std::to_string(SIGUSR1));
  sigaction(SIGUSR1, &previous, nullptr);

  sigset_t usr2, old;
  sigemptyset(&usr2);
  sigaddset(&usr2, SIGUSR2);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &usr2, &old), 0);
  SpawnOptions m = Shell("kill -USR2 $$; exit 0");
  EXPECT_EQ(DescribeWaitStatus(RunToEnd(m)), "exit code 0");  // blocked: stays pending
  m.clear_signal_mask = true;
  EXPECT_EQ(DescribeWaitStatus(RunToEnd(m)), "signal " + std::to_string(SIGUSR2));
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

TEST(Spawn, ClosesOtherDescriptorsWhenAsked) {
  const int fd = open("/dev/null", O_RDONLY);  // no O_CLOEXEC: a child inherits it
  ASSERT_GE(fd, 3);
  SpawnOptions o = Shell("test -e /proc/$$/fd/" + std::to_string(fd));
  EXPECT_EQ(DescribeWaitStatus(RunToEnd(o)), "exit code 0");
  o.close_other_fds = true;
  EXPECT_EQ(DescribeWaitStatus(RunToEnd(o)), "exit code 1");
  EXPECT_NE(fcntl(fd, F_GETFD), -1);  // still open here
  close(fd);
}

TEST(Spawn, SwitchesUser) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root";
  SpawnOptions o = Shell("test \"$(id -u)\" = 65534 && test \"$(id -g)\" = 65534");
  o.user = 65534;
  EXPECT_EQ(DescribeWaitStatus(RunToEnd(o)), "exit code 0");
}

TEST(InheritedEnvironment, DropsByPrefix) {
  ASSERT_EQ(setenv("TESSERA_SPAWN_TEST_DROP", "1", 1), 0);
  ASSERT_EQ(setenv("TESSERA_SPAWN_TEST_KEEP", "2", 1), 0);
  const auto has = [](const std::vector<std::string>& env, const std::string& entry) {
    return std::find(env.begin(), env.end(), entry) != env.end();
  };
  const std::vector<std::string> all = InheritedEnvironment();
  EXPECT_TRUE(has(all, "TESSERA_SPAWN_TEST_DROP=1"));
  const std::vector<std::string> some = InheritedEnvironment({"TESSERA_SPAWN_TEST_DROP="});
  EXPECT_FALSE(has(some, "TESSERA_SPAWN_TEST_DROP=1"));
  EXPECT_TRUE(has(some, "TESSERA_SPAWN_TEST_KEEP=2"));
  EXPECT_EQ(some.size() + 1, all.size());
  EXPECT_TRUE(InheritedEnvironment({"TESSERA_SPAWN_TEST_", ""}).empty());
}

}  // namespace
}  // namespace tessera
