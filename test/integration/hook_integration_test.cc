// The preload library, loaded by LD_PRELOAD into real processes, against the fake driver:
// every resolution path, every hooked path, limits file vs HAMi variables, fail-open and
// fail-closed, many processes, SIGKILL, fork.
#include <chrono>
#include <cstdio>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <signal.h>
#include <spawn.h>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tessera/limits.h"
#include "tessera/quantity.h"
#include "tessera/region.h"

#include "testutil/status_matchers.h"
#include "testutil/temp_dir.h"

extern char** environ;

namespace tessera {
namespace {

constexpr const char* kGpu0 = "GPU-face0000-0000-0000-0000-000000000000";
constexpr const char* kGpu1 = "GPU-face0000-0000-0000-0000-000000000001";

struct Output {
  int exit_code = -1;
  std::string text;
  // key=value pairs of the output (last wins)
  std::map<std::string, std::string> values;
  std::string Get(const std::string& key) const {
    auto it = values.find(key);
    return it == values.end() ? "<missing " + key + ">" : it->second;
  }
  unsigned long long Num(const std::string& key) const {
    auto it = values.find(key);
    if (it == values.end()) {
      ADD_FAILURE() << "no " << key << "= in the output:\n" << text;
      return ~0ULL;
    }
    return std::stoull(it->second);
  }
};

void ParseValues(Output* out) {
  std::istringstream in(out->text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string word;
    while (words >> word) {
      const auto eq = word.find('=');
      if (eq != std::string::npos) out->values[word.substr(0, eq)] = word.substr(eq + 1);
    }
  }
}

class Process {
 public:
  Process(std::vector<std::string> argv, const std::vector<std::string>& env) {
    int fds[2];
    if (pipe(fds) != 0) return;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
    posix_spawn_file_actions_addclose(&actions, fds[0]);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    std::vector<std::string> env_copy = env;
    std::vector<char*> envp;
    for (auto& e : env_copy) envp.push_back(e.data());
    envp.push_back(nullptr);
    if (posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), envp.data()) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    out_fd_ = fds[0];
  }
  ~Process() {
    if (pid_ > 0) Wait();
  }
  // Reads until a line containing `marker` (or EOF).
  std::string ReadUntil(const std::string& marker) {
    char c;
    std::string line;
    while (read(out_fd_, &c, 1) == 1) {
      text_.push_back(c);
      if (c != '\n') {
        line.push_back(c);
        continue;
      }
      if (line.find(marker) != std::string::npos) return line;
      line.clear();
    }
    return line;
  }
  void Kill() { kill(pid_, SIGKILL); }
  pid_t pid() const { return pid_; }
  Output Wait() {
    Output out;
    char buffer[4096];
    ssize_t n;
    while ((n = read(out_fd_, buffer, sizeof(buffer))) > 0)
      text_.append(buffer, static_cast<std::size_t>(n));
    close(out_fd_);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    out.text = text_;
    ParseValues(&out);
    return out;
  }

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::string text_;
};

class HookTest : public ::testing::Test {
 protected:
  void SetUp() override {
    limits_path_ = dir_.path() + "/limits";
    region_path_ = dir_.path() + "/region";
    fake_state_ = dir_.path() + "/fake-state";
  }

  // Writes a limits file and creates the region, as tessera-node / `tessera run` do.
  void Limit(std::uint64_t bytes, std::uint64_t context = 0, bool fail_closed = false,
             bool create_region = true, std::uint64_t stream = 0) {
    Limits limits;
    limits.fail_closed = fail_closed;
    limits.devices.push_back({kGpu0, bytes, 0, context, stream});
    std::ofstream(limits_path_) << FormatLimitsFile(limits);
    if (create_region) {
      auto region = shm::Mapping::Create(region_path_, {{kGpu0, bytes, 0}});
      ASSERT_OK(region);
    }
  }

  std::vector<std::string> Env(const std::vector<std::string>& extra = {}) const {
    std::vector<std::string> env = {
        "LD_PRELOAD=" + std::string(TESSERA_HOOK_LIBRARY),
        "LD_LIBRARY_PATH=" + std::string(TESSERA_FAKE_CUDA_DIR),
        "TESSERA_LIMITS_FILE=" + limits_path_,
        "TESSERA_REGION_FILE=" + region_path_,
        "TESSERA_FAKE_STATE=" + fake_state_,
        "TESSERA_FAKE_GPU_MEMORY=" + std::to_string(16 * kGiB),
        "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0",
        "TESSERA_HOOK_LOG_LEVEL=info",
    };
    env.insert(env.end(), extra.begin(), extra.end());
    return env;
  }

  Output Client(const std::string& mode, std::vector<std::string> args,
                const std::vector<std::string>& extra_env = {}) {
    std::vector<std::string> argv = {
        mode == "direct" ? TESSERA_HOOK_CLIENT_DIRECT : TESSERA_HOOK_CLIENT, mode};
    argv.insert(argv.end(), args.begin(), args.end());
    return Process(argv, Env(extra_env)).Wait();
  }

  std::uint64_t RegionUsed() {
    auto m = shm::Mapping::Attach(region_path_);
    EXPECT_OK(m);
    return m.ok() ? shm::UsedBytes(*m->region(), 0) : 0;
  }

  // The fake device's physical usage of GPU 0, shared by every process using it.
  std::uint64_t FakePhysicalBytes() {
    std::uint64_t value = 0;
    const int fd = open(fake_state_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      if (pread(fd, &value, sizeof(value), 0) != sizeof(value)) value = ~0ULL;
      close(fd);
    }
    return value;
  }

  testutil::TempDir dir_;
  std::string limits_path_, region_path_, fake_state_;
};

class HookModeTest : public HookTest, public ::testing::WithParamInterface<const char*> {};

// cuMemAlloc through each way of reaching the driver stops exactly at the cap, and the views
// report the cap.
TEST_P(HookModeTest, MemAllocStopsAtTheCap) {
  Limit(64 * kMiB);
  const Output out = Client(GetParam(), {"alloc", "plain", std::to_string(4 * kMiB)});
  ASSERT_EQ(out.exit_code, 0) << out.text;
  EXPECT_EQ(out.Get("context_result"), "0");
  EXPECT_EQ(out.Num("allocated"), 64 * kMiB) << out.text;
  EXPECT_EQ(out.Get("last_result"), "2") << "CUDA_ERROR_OUT_OF_MEMORY";
  EXPECT_EQ(out.Num("total"), 64 * kMiB);
  EXPECT_EQ(out.Num("free"), 0u);
  EXPECT_EQ(out.Num("device_total"), 64 * kMiB);
  if (std::string(GetParam()) == "runtime") {
    EXPECT_EQ(out.Get("self_lookup_11030_hooked"), "1") << out.text;
    EXPECT_EQ(out.Get("self_lookup_12000_hooked"), "1") << out.text;
    EXPECT_EQ(out.text.find("hooked=0"), std::string::npos) << out.text;
  }
}

TEST_P(HookModeTest, PitchAllocationsAreCharged) {
  Limit(64 * kMiB);
  const Output out = Client(GetParam(), {"alloc", "pitch", std::to_string(4 * kMiB)});
  ASSERT_EQ(out.exit_code, 0) << out.text;
  EXPECT_LE(out.Num("allocated"), 64 * kMiB);
  EXPECT_GT(out.Num("allocated"), 60 * kMiB);
  EXPECT_EQ(out.Get("last_result"), "2");
}

TEST_P(HookModeTest, ManagedAllocationsAreCharged) {
  Limit(64 * kMiB);
  const Output out = Client(GetParam(), {"alloc", "managed", std::to_string(4 * kMiB)});
  ASSERT_EQ(out.exit_code, 0) << out.text;
  EXPECT_EQ(out.Num("allocated"), 64 * kMiB);
  EXPECT_EQ(out.Get("last_result"), "2");
}

TEST_P(HookModeTest, FreeReturnsTheQuota) {
  Limit(64 * kMiB);
  const Output out = Client(GetParam(), {"free", std::to_string(40 * kMiB)});
  ASSERT_EQ(out.exit_code, 0) << out.text;
  EXPECT_EQ(out.Get("first"), "0");
  EXPECT_EQ(out.Get("second_before_free"), "2");
  EXPECT_EQ(out.Get("free_result"), "0");
  EXPECT_EQ(out.Get("second_after_free"), "0");
  EXPECT_EQ(out.Get("free_unknown"), "1") << "the driver's own error passes through";
  EXPECT_EQ(out.Num("free"), 24 * kMiB);
}

TEST_P(HookModeTest, PerThreadVariantsReachTheDriver) {
  Limit(64 * kMiB);
  const Output out = Client(GetParam(), {"launch"});
  ASSERT_EQ(out.exit_code, 0) << out.text;
  EXPECT_EQ(out.Get("launch"), "0");
  EXPECT_EQ(out.Get("launch_ptsz"), "0");
  EXPECT_EQ(out.Get("memcpy_ptds"), "0");
}

INSTANTIATE_TEST_SUITE_P(Paths, HookModeTest, ::testing::Values("direct", "dlopen", "runtime"));

TEST_F(HookTest, EveryRowIsHookedAndReachesTheDriver) {
  Limit(64 * kMiB);
  const Output out = Process({TESSERA_HOOK_SNIPPETS}, Env()).Wait();
  EXPECT_EQ(out.exit_code, 0) << out.text;
  EXPECT_EQ(out.Get("failures"), "0") << out.text;
  EXPECT_GT(out.Num("rows"), 40u);
}

// NVML, reached through dlopen + dlsym as nvidia-smi does, reports the cap and the container's
// usage; an unlimited device keeps its physical view.
TEST_F(HookTest, NvmlReportsTheCapAndTheContainersUsage) {
  Limit(64 * kMiB, /*context=*/4 * kMiB);
  const Output out = Client("dlopen", {"nvml", std::to_string(16 * kMiB)},
                            {"TESSERA_FAKE_NVML_OTHER_PIDS=4242,4343"});
  ASSERT_EQ(out.exit_code, 0) << out.text;
  // The process list shows only this container's processes, not the other tenants'.
  EXPECT_EQ(out.Get("procs_result"), "0");
  EXPECT_EQ(out.Get("procs"), "1") << out.text;
  EXPECT_EQ(out.Get("procs_only_me"), "1");
  EXPECT_EQ(out.Get("alloc"), "0");
  EXPECT_EQ(out.Get("nvml_result"), "0");
  EXPECT_EQ(out.Num("nvml_total"), 64 * kMiB);
  EXPECT_EQ(out.Num("nvml_used"), 20 * kMiB);  // 16 MiB + the 4 MiB context charge
  EXPECT_EQ(out.Num("nvml_free"), 44 * kMiB);
  EXPECT_EQ(out.Get("nvml2_result"), "0");
  EXPECT_EQ(out.Num("nvml2_total"), 64 * kMiB);
  EXPECT_EQ(out.Num("nvml2_used"), 20 * kMiB);
  const Output other = Client("dlopen", {"nvml", std::to_string(kMiB)},
                              {"NVML_INDEX=1", "TESSERA_FAKE_NVML_OTHER_PIDS=4242"});
  EXPECT_EQ(other.Num("nvml_total"), 16 * kGiB) << other.text;  // GPU 1 is not in the limits
  // Nor filtered: the other tenant is listed (this process holds nothing on GPU 1).
  EXPECT_EQ(other.Get("procs"), "1");
}

TEST_F(HookTest, VirtualMemoryIsChargedAtCreateNotAtMap) {
  Limit(64 * kMiB);
  const Output out = Client("dlopen", {"vmm", std::to_string(8 * kMiB)});
  ASSERT_EQ(out.exit_code, 0) << out.text;
  EXPECT_EQ(out.Get("vmm_created"), "8") << out.text;  // 8 x 8 MiB = the cap
  EXPECT_EQ(out.Get("vmm_last"), "2");
  EXPECT_EQ(out.Get("vmm_map"), "0");  // mapping is not charged again
  EXPECT_EQ(out.Num("vmm_free_before"), 0u);
  EXPECT_EQ(out.Num("vmm_free_after"), 64 * kMiB);  // cuMemRelease returned it all
  EXPECT_EQ(out.Get("vmm_host"), "0");              // host memory is not the GPU's
}

// A pool is charged its reserved memory: frees keep it charged (the pool keeps the memory),
// and the process's pools are trimmed before an allocation is refused.
TEST_F(HookTest, MemoryPoolsAreChargedTheirReserveAndTrimmedBeforeRefusing) {
  Limit(64 * kMiB);
  const Output out = Client("dlopen", {"pool", std::to_string(8 * kMiB)});
  ASSERT_EQ(out.exit_code, 0) << out.text;
  EXPECT_EQ(out.Get("pool_allocs"), "8") << out.text;
  EXPECT_EQ(out.Get("pool_last"), "2");
  EXPECT_EQ(out.Num("pool_free_after_frees"), 0u);  // freed into the pool, still reserved
  EXPECT_EQ(out.Get("plain_after_free"), "0");      // trimmed, then granted
  EXPECT_EQ(out.Get("pool_create"), "0");
  EXPECT_EQ(out.Get("from_pool"), "0");
  EXPECT_EQ(out.Get("pool_destroy"), "0");
  // The default pool was trimmed to nothing, the plain allocation freed, and destroying the
  // created pool returned its reserve: the whole cap is free again.
  EXPECT_EQ(out.Num("pool_free_at_end"), 64 * kMiB) << out.text;
  EXPECT_EQ(out.Get("captured_alloc"), "0") << out.text;  // 800 MiB, but a graph node: not charged
}

TEST_F(HookTest, GraphMemoryNodesAndExternalMemoryAreCharged) {
  Limit(64 * kMiB);
  const Output out = Client("dlopen", {"graph", "40"});
  ASSERT_EQ(out.exit_code, 0) << out.text;
  EXPECT_EQ(out.Get("graph_first"), "0") << out.text;
  EXPECT_EQ(out.Get("graph_second"), "2");  // 40 + 40 MiB > 64 MiB: refused at instantiation
  EXPECT_EQ(out.Get("graph_destroy"), "0");
  EXPECT_EQ(out.Get("graph_third"), "0");  // the first graph's reserve came back
  EXPECT_EQ(out.Get("ext_first"), "0");
  EXPECT_EQ(out.Get("ext_second"), "2");
  EXPECT_EQ(out.Get("ext_destroy"), "0");
  EXPECT_EQ(out.Get("ext_third"), "0");
}

TEST_F(HookTest, ArraysAreCharged) {
  Limit(64 * kMiB);
  const Output out = Client("dlopen", {"array"});
  ASSERT_EQ(out.exit_code, 0) << out.text;
  EXPECT_EQ(out.Get("arrays"), "4") << out.text;  // 4 x 16 MiB
  EXPECT_EQ(out.Get("array_last"), "2");
  EXPECT_EQ(out.Get("array_after_destroy"), "0");
}

// Streams take device memory of their own (PyTorch's stream pools: 128 streams, 70 MiB on the
// H200): each is charged the measured per-stream size, refused past the cap, returned at destroy.
TEST_F(HookTest, StreamsAreChargedTheirMeasuredSize) {
  Limit(64 * kMiB, /*context=*/0, false, true, /*stream=*/4 * kMiB);
  const Output out =
      Client("dlopen", {"streams"}, {"TESSERA_FAKE_STREAM_BYTES=" + std::to_string(4 * kMiB)});
  ASSERT_EQ(out.exit_code, 0) << out.text;
  EXPECT_EQ(out.Get("streams"), "16") << out.text;
  EXPECT_EQ(out.Get("streams_last"), "2") << "CUDA_ERROR_OUT_OF_MEMORY";
  EXPECT_EQ(out.Num("streams_free"), 0u);
  EXPECT_EQ(out.Num("streams_free_after_destroy"), 64 * kMiB);
  EXPECT_EQ(RegionUsed(), 0u);
}

TEST_F(HookTest, StreamsAreFreeWhenNoSizeIsConfigured) {
  Limit(64 * kMiB);
  const Output out =
      Client("dlopen", {"streams"}, {"TESSERA_FAKE_STREAM_BYTES=" + std::to_string(4 * kMiB)});
  ASSERT_EQ(out.exit_code, 0) << out.text;
  EXPECT_EQ(out.Get("streams"), "256") << out.text;
  EXPECT_EQ(out.Num("streams_free"), 64 * kMiB);
}

TEST_F(HookTest, ContextIsChargedOncePerProcess) {
  Limit(64 * kMiB, /*context=*/16 * kMiB);
  const Output out = Client("dlopen", {"alloc", "plain", std::to_string(4 * kMiB)});
  EXPECT_EQ(out.Num("allocated"), 48 * kMiB) << out.text;
  EXPECT_EQ(out.Num("free"), 0u);
}

TEST_F(HookTest, ContextLargerThanTheCapIsRefused) {
  Limit(8 * kMiB, /*context=*/16 * kMiB);
  const Output out = Client("dlopen", {"alloc", "plain", std::to_string(kMiB)});
  EXPECT_EQ(out.Get("context_result"), "2") << out.text;
}

TEST_F(HookTest, WithoutConfigurationEverythingPassesThrough) {
  const Output out = Client("dlopen", {"alloc", "plain", std::to_string(kGiB)},
                            {"TESSERA_LIMITS_FILE=" + dir_.path() + "/none"});
  EXPECT_EQ(out.Num("allocated"), 16 * kGiB) << out.text;  // the whole fake GPU
  EXPECT_EQ(out.Num("total"), 16 * kGiB);
}

TEST_F(HookTest, HamiVariablesAreHonouredWithoutALimitsFile) {
  const Output out =
      Client("dlopen", {"alloc", "plain", std::to_string(kMiB)},
             {"TESSERA_LIMITS_FILE=" + dir_.path() + "/none", "CUDA_DEVICE_MEMORY_LIMIT=32m"});
  EXPECT_EQ(out.Num("allocated"), 32 * kMiB) << out.text;
  EXPECT_EQ(out.Num("total"), 32 * kMiB);
  EXPECT_NE(out.text.find("weaker trust"), std::string::npos);
}

TEST_F(HookTest, HamiPerDeviceVariableWins) {
  const Output out =
      Client("dlopen", {"alloc", "plain", std::to_string(kMiB)},
             {"TESSERA_LIMITS_FILE=" + dir_.path() + "/none", "CUDA_DEVICE_MEMORY_LIMIT=32m",
              "CUDA_DEVICE_MEMORY_LIMIT_1=8m", "CLIENT_DEVICE=1"});
  EXPECT_EQ(out.Num("allocated"), 8 * kMiB) << out.text;
}

TEST_F(HookTest, TheEnvironmentCannotRaiseANodeWrittenLimit) {
  Limit(64 * kMiB);
  const Output out = Client("dlopen", {"alloc", "plain", std::to_string(4 * kMiB)},
                            {"CUDA_DEVICE_MEMORY_LIMIT=8g"});
  EXPECT_EQ(out.Num("allocated"), 64 * kMiB) << out.text;
}

// A container the device plugin gave a slot (/etc/tessera is a mount point) whose limits file is
// missing — the node's files removed under it — fails closed, whatever limits file the
// environment names; a plain /etc/tessera folder (a host's own) changes nothing. The container
// is a private mount namespace over a tmpfs /etc (root only; the host's /etc is untouched).
TEST_F(HookTest, ASlotsContainerWithoutItsLimitsFileFailsClosed) {
  if (geteuid() != 0 || access("/usr/bin/unshare", X_OK) != 0) {
    GTEST_SKIP() << "needs root and unshare(1) for a private mount namespace";
  }
  Limit(8 * kGiB);  // the environment's file (TESSERA_LIMITS_FILE): must not stand in
  for (const bool mounted : {true, false}) {
    const std::string setup = std::string("mount -t tmpfs none /etc && mkdir /etc/tessera") +
                              (mounted ? " && mount -t tmpfs slot /etc/tessera" : "") +
                              " && exec \"$@\"";
    const Output out =
        Process({"/usr/bin/unshare", "-m", "sh", "-c", setup, "sh", TESSERA_HOOK_CLIENT, "dlopen",
                 "alloc", "plain", std::to_string(kGiB)},
                Env())
            .Wait();
    if (mounted) {
      EXPECT_NE(out.text.find("limits file /etc/tessera/limits is missing; enforcement "
                              "fail-closed"),
                std::string::npos)
          << out.text;
      EXPECT_EQ(out.values.count("allocated"), 0u) << out.text;  // not even a context
    } else {
      EXPECT_EQ(out.Num("allocated"), 8 * kGiB) << out.text;
    }
  }
}

TEST_F(HookTest, FailOpenPassesThroughWhenTheRegionIsMissing) {
  Limit(64 * kMiB, 0, /*fail_closed=*/false, /*create_region=*/false);
  const Output out = Client("dlopen", {"alloc", "plain", std::to_string(kGiB)});
  EXPECT_EQ(out.Num("allocated"), 16 * kGiB) << out.text;
  EXPECT_NE(out.text.find("fail-open"), std::string::npos);
}

TEST_F(HookTest, FailClosedRefusesWhenTheRegionIsMissing) {
  Limit(64 * kMiB, 0, /*fail_closed=*/true, /*create_region=*/false);
  const Output out = Client("dlopen", {"alloc", "plain", std::to_string(kMiB)});
  EXPECT_EQ(out.Get("context_result"), "2") << out.text;  // nothing at all on the GPU
  EXPECT_NE(out.text.find("fail-closed"), std::string::npos);
}

TEST_F(HookTest, MalformedLimitsFileFailsClosed) {
  std::ofstream(limits_path_) << "version 1\ndevice " << kGpu0 << " memory=lots\n";
  const Output out = Client("dlopen", {"alloc", "plain", std::to_string(kMiB)});
  EXPECT_EQ(out.Get("context_result"), "2") << out.text;  // nothing at all on the GPU
  EXPECT_NE(out.text.find("memory=\"lots\" is not a byte count"), std::string::npos) << out.text;
}

TEST_F(HookTest, DeviceNotInTheLimitsIsRefused) {
  Limit(64 * kMiB);
  const Output out =
      Client("dlopen", {"alloc", "plain", std::to_string(kMiB)}, {"CLIENT_DEVICE=1"});
  EXPECT_EQ(out.Get("context_result"), "2") << out.text;  // not even a context on it
  EXPECT_NE(out.text.find(kGpu1), std::string::npos);
}

// A child forked while another thread is inside an allocation hook must not hang in the
// library's fork handler.
TEST_F(HookTest, ForkWhileAnotherThreadAllocatesNeverHangsTheChild) {
  Limit(64 * kMiB);
  const Output out = Client("dlopen", {"fork-threads", "200"});
  EXPECT_EQ(out.exit_code, 0) << out.text;
  EXPECT_EQ(out.Get("children_hung"), "0") << out.text;
}

// An application that dlcloses libcuda and opens it again keeps its cap (the library holds its
// own reference to the driver, so the real entry points never dangle).
TEST_F(HookTest, DlcloseAndReopenKeepTheCap) {
  Limit(64 * kMiB);
  const Output out = Process({TESSERA_HOOK_CLIENT, "dlclose"}, Env()).Wait();
  EXPECT_EQ(out.exit_code, 0) << out.text;
  EXPECT_EQ(out.Get("before_dlclose"), "0");
  EXPECT_EQ(out.Get("dlclose"), "0");
  EXPECT_EQ(out.Get("after_reopen_over_cap"), "2") << out.text;  // 16 + 64 > 64 MiB
  EXPECT_EQ(out.Get("after_reopen_fits"), "0");
}

// Our exports exist even without a driver behind them: calling one returns an error, never
// a crash.
TEST_F(HookTest, HookedEntryPointsWithoutADriverFailCleanly) {
  Limit(64 * kMiB);
  const Output out =
      Process({TESSERA_HOOK_CLIENT, "no-driver"},
              {"LD_PRELOAD=" + std::string(TESSERA_HOOK_LIBRARY),
               "TESSERA_LIMITS_FILE=" + limits_path_, "TESSERA_REGION_FILE=" + region_path_})
          .Wait();
  EXPECT_EQ(out.exit_code, 0) << out.text;
  EXPECT_EQ(out.Get("get_info"), "500") << out.text;  // CUDA_ERROR_NOT_FOUND
  EXPECT_EQ(out.Get("alloc"), "500") << out.text;
}

// Many processes of one container starting together in HAMi mode: the first creates the region,
// the others attach to a complete one; nobody runs uncapped.
TEST_F(HookTest, HamiRegionCreatedConcurrentlyStillCapsEveryone) {
  for (int round = 0; round < 3; ++round) {
    const std::string region = dir_.path() + "/hami-" + std::to_string(round);
    std::vector<std::unique_ptr<Process>> processes;
    for (int i = 0; i < 12; ++i) {
      processes.push_back(std::make_unique<Process>(
          std::vector<std::string>{TESSERA_HOOK_CLIENT, "dlopen", "hold", std::to_string(4 * kMiB)},
          Env({"TESSERA_LIMITS_FILE=" + dir_.path() + "/none", "CUDA_DEVICE_MEMORY_LIMIT=32m",
               "TESSERA_REGION_FILE=" + region})));
    }
    int granted = 0;
    for (auto& p : processes) {
      if (p->ReadUntil("hold_result=") == "hold_result=0") ++granted;
    }
    EXPECT_EQ(granted, 8) << "round " << round;  // 8 x 4 MiB = the 32 MiB cap
    for (auto& p : processes) p->Kill();
  }
}

// dlsym(RTLD_NEXT) from a dlopen'ed plugin resolves exactly as without the preload.
TEST_F(HookTest, RtldNextLookupsOfOtherLibrariesAreUntouched) {
  const Output out =
      Process({TESSERA_HOOK_CLIENT, "rtld-next", TESSERA_RTLD_NEXT_PLUGIN}, Env()).Wait();
  EXPECT_EQ(out.exit_code, 0) << out.text;
  EXPECT_EQ(out.Get("getpid_found"), "1") << out.text;
  EXPECT_EQ(out.Get("strlen_found"), "1") << out.text;
  EXPECT_EQ(out.Get("default_getpid"), "1") << out.text;
}

TEST_F(HookTest, ALibraryConstructorUsingCudaFirstIsStillCapped) {
  Limit(64 * kMiB);
  const Output out = Process({TESSERA_CTOR_CLIENT}, Env()).Wait();
  EXPECT_EQ(out.Get("ctor_result"), "2") << out.text;
  EXPECT_EQ(out.Num("ctor_allocated"), 64 * kMiB) << out.text;
}

TEST_F(HookTest, ATenantRaisingTheLimitInTheRegionGainsNothing) {
  Limit(64 * kMiB);
  {
    auto m = shm::Mapping::Attach(region_path_);
    ASSERT_OK(m);
    m->region()->devices[0].limit_bytes = 16 * kGiB;  // the region is tenant-writable
  }
  const Output out = Client("dlopen", {"alloc", "plain", std::to_string(4 * kMiB)});
  EXPECT_EQ(out.Num("allocated"), 64 * kMiB) << out.text;
}

// 16 processes racing under one cap never exceed it in sum, neither in tessera's accounting
// nor in the fake device's physical usage (what nvidia-smi would show).
TEST_F(HookTest, SixteenLiveProcessesShareOneCap) {
  Limit(256 * kMiB);
  std::vector<std::unique_ptr<Process>> processes;
  for (int i = 0; i < 16; ++i) {
    processes.push_back(std::make_unique<Process>(
        std::vector<std::string>{TESSERA_HOOK_CLIENT, "dlopen", "hold", std::to_string(24 * kMiB)},
        Env()));
  }
  int granted = 0;
  for (auto& p : processes) {
    const std::string line = p->ReadUntil("hold_result=");
    if (line == "hold_result=0") ++granted;
  }
  EXPECT_EQ(granted, 10);  // 10 x 24 MiB = 240 MiB fit in 256 MiB; an 11th would not
  EXPECT_EQ(RegionUsed(), 240 * kMiB);
  EXPECT_EQ(FakePhysicalBytes(), 240 * kMiB);
  for (auto& p : processes) p->Kill();
}

TEST_F(HookTest, SigkilledProcessReleasesItsQuota) {
  Limit(64 * kMiB);
  {
    Process holder({TESSERA_HOOK_CLIENT, "dlopen", "hold", std::to_string(48 * kMiB)}, Env());
    ASSERT_EQ(holder.ReadUntil("hold_result="), "hold_result=0");
    EXPECT_EQ(RegionUsed(), 48 * kMiB);
    holder.Kill();
  }
  const Output out = Client("dlopen", {"alloc", "plain", std::to_string(4 * kMiB)});
  EXPECT_EQ(out.Num("allocated"), 64 * kMiB) << out.text;
}

TEST_F(HookTest, ForkedChildAccountsInItsOwnSlot) {
  Limit(64 * kMiB);
  const Output out = Client("dlopen", {"fork", std::to_string(40 * kMiB)});
  EXPECT_EQ(out.Get("child_alloc"), "0") << out.text;
  // The child died holding 40 MiB in a slot of its own; the slot is reclaimed, so the parent
  // (whose slot it would have been, had the child kept the parent's) gets room again.
  EXPECT_EQ(out.Get("parent_alloc_after_child"), "0") << out.text;
}

// `tessera run` plays the node agent locally: limits file, region, preload, one visible GPU.
class TesseraRunTest : public HookTest {
 protected:
  Output Run(std::vector<std::string> args, const std::vector<std::string>& extra_env = {}) {
    return Process(Argv(std::move(args)), Env(extra_env)).Wait();
  }
  static std::vector<std::string> Argv(std::vector<std::string> args) {
    std::vector<std::string> argv = {TESSERA_CLI, "run"};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }
  static std::vector<std::string> Env(const std::vector<std::string>& extra_env = {}) {
    std::vector<std::string> env = {"LD_LIBRARY_PATH=" + std::string(TESSERA_FAKE_CUDA_DIR),
                                    "TESSERA_FAKE_GPU_MEMORY=" + std::to_string(16 * kGiB),
                                    "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0",
                                    "PATH=/usr/bin:/bin"};
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    return env;
  }
};

TEST_F(TesseraRunTest, CapsTheCommand) {
  const Output out = Run({"--gpu-memory", "64Mi", "--context-bytes", "0", "--", TESSERA_HOOK_CLIENT,
                          "dlopen", "alloc", "plain", std::to_string(4 * kMiB)});
  EXPECT_EQ(out.exit_code, 0) << out.text;
  EXPECT_EQ(out.Num("allocated"), 64 * kMiB) << out.text;
  EXPECT_EQ(out.Num("total"), 64 * kMiB);
  EXPECT_NE(out.text.find("peak 64.00 MiB of 64.00 MiB, 1 allocation(s) refused"),
            std::string::npos)
      << out.text;
}

TEST_F(TesseraRunTest, ChargesTheContextAndPicksTheGpu) {
  const Output out =
      Run({"--gpu-memory", "64Mi", "--context-bytes", "16Mi", "--gpu", kGpu1, "--",
           TESSERA_HOOK_CLIENT, "dlopen", "alloc", "plain", std::to_string(4 * kMiB)});
  EXPECT_EQ(out.exit_code, 0) << out.text;
  EXPECT_EQ(out.Num("allocated"), 48 * kMiB) << out.text;
  EXPECT_NE(out.text.find(kGpu1), std::string::npos);
}

// Without --context-bytes, a probe process's context and 128 streams are measured with NVML
// (per process, as on the H200) and charged: the command then gets the cap minus its context,
// in streams of the measured size.
TEST_F(TesseraRunTest, MeasuresTheContextAndStreamsWithNvml) {
  const Output out = Run({"--gpu-memory", "64Mi", "--", TESSERA_HOOK_CLIENT, "dlopen", "streams"},
                         {"TESSERA_FAKE_STATE=" + fake_state_,
                          "TESSERA_FAKE_CONTEXT_BYTES=" + std::to_string(16 * kMiB),
                          "TESSERA_FAKE_STREAM_BYTES=" + std::to_string(kMiB)});
  EXPECT_EQ(out.exit_code, 0) << out.text;
  EXPECT_NE(out.text.find("(context 16.00 MiB, streams 1.00 MiB each, measured)"),
            std::string::npos)
      << out.text;
  EXPECT_EQ(out.Get("streams"), "48") << out.text;
  EXPECT_EQ(out.Get("streams_last"), "2");
}

TEST_F(TesseraRunTest, CapsEveryChosenGpuSeparately) {
  for (const char* device : {"0", "1"}) {
    std::vector<std::string> args = {"--gpu-memory",
                                     "64Mi",
                                     "--context-bytes",
                                     "0",
                                     "--gpu",
                                     "1,0",
                                     "--",
                                     "/usr/bin/env",
                                     std::string("CLIENT_DEVICE=") + device,
                                     TESSERA_HOOK_CLIENT,
                                     "dlopen",
                                     "alloc",
                                     "plain",
                                     std::to_string(4 * kMiB)};
    const Output out = Run(args);
    EXPECT_EQ(out.exit_code, 0) << out.text;
    EXPECT_EQ(out.Num("allocated"), 64 * kMiB) << "device " << device << "\n" << out.text;
    EXPECT_EQ(out.Num("total"), 64 * kMiB);
    EXPECT_NE(out.text.find(std::string(kGpu1) + ": peak"), std::string::npos) << out.text;
  }
}

TEST_F(TesseraRunTest, ReturnsTheCommandsExitCode) {
  const Output out =
      Run({"--gpu-memory", "1Gi", "--context-bytes", "0", "--", "/bin/sh", "-c", "exit 7"});
  EXPECT_EQ(out.exit_code, 7) << out.text;
}

TEST_F(TesseraRunTest, RejectsBadInput) {
  const Output big = Run({"--gpu-memory", "17Gi", "--", "/bin/true"});
  EXPECT_EQ(big.exit_code, 2);
  EXPECT_NE(big.text.find("--gpu-memory: 17Gi is more than GPU"), std::string::npos) << big.text;
  const Output gpu = Run({"--gpu-memory", "1Gi", "--gpu", "7", "--", "/bin/true"});
  EXPECT_EQ(gpu.exit_code, 2);
  EXPECT_NE(gpu.text.find("--gpu: \"7\" matches none of the 2 CUDA devices"), std::string::npos)
      << gpu.text;
  const Output missing = Run({"--gpu-memory", "1Gi", "--", "/nonexistent/program"});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.text.find("cannot run"), std::string::npos) << missing.text;
}

// The compute governor through the real launch path (the fake driver's "tessera_spin" kernels
// are queued on their stream's timeline, so they take time like GPU work): the numbers are `tessera
// run`'s closing line, read from the container's region.
unsigned long long MsAfter(const std::string& text, const std::string& label) {
  const std::size_t at = text.rfind(label);
  return at == std::string::npos ? ~0ULL : std::stoull(text.substr(at + label.size()));
}
// The closing line's count of governed launches (~0 if there is none).
unsigned long long GovernedLaunches(const std::string& text) {
  const std::size_t at = text.rfind(" governed launch(es)");
  return at == std::string::npos ? ~0ULL : std::stoull(text.substr(text.rfind(' ', at - 1)));
}

TEST_F(TesseraRunTest, AloneWithoutAShareLaunchesRunUngoverned) {
  testutil::TempDir arbiter;
  const Output out =
      Run({"--gpu-memory", "1Gi", "--context-bytes", "0", "--arbiter-dir", arbiter.path(), "--",
           TESSERA_HOOK_CLIENT, "dlopen", "spin", "0.5", "500"});
  EXPECT_EQ(out.exit_code, 0) << out.text;
  EXPECT_GT(out.Num("kernels"), 0u) << out.text;
  EXPECT_NE(out.text.find(", 0 governed launch(es)"), std::string::npos) << out.text;
}

TEST_F(TesseraRunTest, AHardShareHoldsLaunchesAndMeasuresBusyTime) {
  testutil::TempDir arbiter;
  const Output out =
      Run({"--gpu-cores", "20", "--context-bytes", "0", "--arbiter-dir", arbiter.path(), "--",
           TESSERA_HOOK_CLIENT, "dlopen", "spin", "1.5", "500"});
  EXPECT_EQ(out.exit_code, 0) << out.text;
  EXPECT_NE(out.text.find("compute 20 % hard"), std::string::npos) << out.text;
  EXPECT_GT(MsAfter(out.text, "GPU busy "), 0u) << out.text;
  EXPECT_GT(MsAfter(out.text, "throttled "), 0u)
      << out.text;  // the share ran out and launches waited
  EXPECT_EQ(MsAfter(out.text, "held for priority "), 0u) << out.text;
  EXPECT_GT(out.Num("kernels"), 0u);
}

// Every governed launch is counted in the region, although the launches keep their count in the
// process and the watcher writes it (the region's counters are a cache line every process of the
// container shares): the launches after the watcher's last poll (here 64 launched just before
// the process exits, nothing waiting for them) are written at exit.
TEST_F(TesseraRunTest, EveryGovernedLaunchIsCounted) {
  testutil::TempDir arbiter;
  const Output out =
      Run({"--gpu-cores", "50", "--context-bytes", "0", "--arbiter-dir", arbiter.path(), "--",
           TESSERA_HOOK_CLIENT, "dlopen", "spin", "0.5", "100", "exit"});
  EXPECT_EQ(out.exit_code, 0) << out.text;
  EXPECT_EQ(GovernedLaunches(out.text), out.Num("kernels")) << out.text;
}

// CUDA 13's runtime synchronizes a device through cuCtxSynchronize_v2 (asked of cuGetProcAddress
// at 13000): the library answers its own entry point, which fences the governed work before the
// wait as cuCtxSynchronize's does (on the H200 none of cudaDeviceSynchronize's calls reached the
// library before it had one).
TEST_F(TesseraRunTest, Cuda13DeviceSynchronizeReachesTheLibrary) {
  testutil::TempDir arbiter;
  const Output out =
      Run({"--gpu-cores", "50", "--context-bytes", "0", "--arbiter-dir", arbiter.path(), "--",
           TESSERA_HOOK_CLIENT, "dlopen", "spin13", "0.5", "100"},
          {"TESSERA_HOOK_STATS=1"});
  EXPECT_EQ(out.exit_code, 0) << out.text;
  EXPECT_EQ(out.Num("sync_errors"), 0u) << out.text;
  EXPECT_GT(out.Num("kernels"), 8u) << out.text;
  EXPECT_EQ(GovernedLaunches(out.text), out.Num("kernels")) << out.text;
  const std::string counted = "stats: cuCtxSynchronize_v2 ";
  const std::size_t at = out.text.find(counted);
  ASSERT_NE(at, std::string::npos) << out.text;
  EXPECT_EQ(std::stoull(out.text.substr(at + counted.size())), out.Num("syncs")) << out.text;
}

// Launches into a stream being captured are graph nodes: they pass ungoverned, and nothing of the
// governor's (a fence event, a probe's gate) goes into the capture — the fake driver fails the
// capture's end if anything but a launch went in. Once every capture has ended, governed launches
// ask the driver nothing about capture (the count of captures begun through the library is 0).
TEST_F(TesseraRunTest, LaunchesIntoACaptureAreGraphNodesAndCapturesAreCounted) {
  testutil::TempDir arbiter;
  const Output out =
      Run({"--gpu-cores", "50", "--context-bytes", "0", "--arbiter-dir", arbiter.path(), "--",
           TESSERA_HOOK_CLIENT, "dlopen", "capture", "1", "100"});
  EXPECT_EQ(out.exit_code, 0) << out.text;
  EXPECT_EQ(out.Get("begin_capture"), "0") << out.text;
  EXPECT_EQ(out.Num("captured_launches"), 64u) << out.text;
  EXPECT_EQ(out.Get("end_capture"), "0") << out.text;  // nothing of ours went into it
  EXPECT_EQ(out.Num("sync_errors"), 0u) << out.text;
  EXPECT_GT(out.Num("kernels"), 50u) << out.text;
  EXPECT_EQ(out.Num("capture_queries"), 0u) << out.text;
  EXPECT_GT(MsAfter(out.text, "GPU busy "), 0u) << out.text;  // the launches after it: governed
  const unsigned long long governed = GovernedLaunches(out.text);
  ASSERT_NE(governed, ~0ULL) << out.text;
  EXPECT_GT(governed, 0u) << out.text;
  EXPECT_LE(governed, out.Num("kernels")) << out.text;  // the captured 64 are not among them
}

// The probes' gate (TESSERA_PROBE_GATE=1) against the fake driver's stream waits: every gate
// the library closes is opened again (a synchronize never finds one closed), the work is
// measured, and no gate is closed in front of a launch that synchronizes the context (the fake,
// like CUDA's lazy loading, does so at a function's first launch: a probe held there would have
// waited for itself until the library's watchdog opened it). The probes' controls (the library's
// own empty kernel, loaded and run once by the watcher before any is launched behind the gate)
// are timed behind it, about one held probe in four. The same run without the gate: no control.
TEST_F(TesseraRunTest, TheProbeGateIsAlwaysOpenedAgain) {
  for (const char* gate : {"1", "0"}) {
    testutil::TempDir arbiter;
    const Output out =
        Run({"--gpu-cores", "50", "--context-bytes", "0", "--arbiter-dir", arbiter.path(), "--",
             TESSERA_HOOK_CLIENT, "dlopen", "spin", "1", "100"},
            {std::string("TESSERA_PROBE_GATE=") + gate, "TESSERA_HOOK_STATS=1"});
    EXPECT_EQ(out.exit_code, 0) << out.text;
    EXPECT_EQ(out.Num("sync_errors"), 0u) << "gate " << gate << ": " << out.text;
    EXPECT_GT(out.Num("kernels"), 50u) << out.text;
    EXPECT_GT(MsAfter(out.text, "GPU busy "), 0u) << out.text;
    EXPECT_EQ(out.text.find("compute governor:"), std::string::npos) << out.text;  // fail-open
    const std::size_t at = out.text.find(" controls timed");
    ASSERT_NE(at, std::string::npos) << out.text;
    const unsigned long long controls = std::stoull(out.text.substr(out.text.rfind(' ', at - 1)));
    if (gate[0] == '1') {
      EXPECT_GT(controls, 0u) << out.text;
    } else {
      EXPECT_EQ(controls, 0u) << out.text;
    }
  }
}

// The probes' nanosecond knobs come from the container's environment, which is the tenant's: a
// value that would charge less than the H200's constants is refused, naming the variable and the
// accepted form, and the constant is used.
TEST_F(TesseraRunTest, TheProbesKnobsMayOnlyRaiseTheCharge) {
  testutil::TempDir arbiter;
  const Output out =
      Run({"--gpu-cores", "50", "--context-bytes", "0", "--arbiter-dir", arbiter.path(), "--",
           TESSERA_HOOK_CLIENT, "dlopen", "spin", "0.3", "100"},
          {"TESSERA_PROBE_SETUP_NS=1000000", "TESSERA_PROBE_CONTROL_NS=0", "TESSERA_HOOK_STATS=1"});
  EXPECT_EQ(out.exit_code, 0) << out.text;
  EXPECT_NE(out.text.find("TESSERA_PROBE_SETUP_NS=1000000: expected whole nanoseconds from 0 to "
                          "1050; using 1050"),
            std::string::npos)
      << out.text;
  EXPECT_NE(out.text.find("TESSERA_PROBE_CONTROL_NS=0: expected whole nanoseconds from 576 to "),
            std::string::npos)
      << out.text;
  EXPECT_NE(out.text.find("stats: probes: offset 2300 ns taken off each"), std::string::npos)
      << out.text;
}

// The governor fails under a running command: its arbiter stops deciding (the `tessera run`
// process that hosts it is stopped for a second). A fail-open container runs ungoverned
// meanwhile; a fail-closed one waits for the arbiter, then is governed again. Both are counted
// and said (and exported: tessera_container_gpu_governor_*, TesseraGovernorFailed).
TEST_F(TesseraRunTest, AFailedGovernorFailsOpenOrClosedAsTheTierSays) {
  for (const bool closed : {false, true}) {
    testutil::TempDir arbiter;
    std::vector<std::string> args = {"--gpu-cores",   "50",          "--context-bytes", "0",
                                     "--arbiter-dir", arbiter.path()};
    if (closed) args.push_back("--fail-closed");
    for (const char* a : {"--", TESSERA_HOOK_CLIENT, "dlopen", "spin", "2.5", "100"})
      args.push_back(a);
    Process run(Argv(args), Env());
    std::this_thread::sleep_for(std::chrono::milliseconds(700));  // the command is launching
    kill(run.pid(), SIGSTOP);
    std::this_thread::sleep_for(std::chrono::seconds(1));  // well past the 200 ms staleness
    kill(run.pid(), SIGCONT);
    const Output out = run.Wait();
    EXPECT_EQ(out.exit_code, 0) << out.text;
    EXPECT_EQ(out.Num("sync_errors"), 0u) << out.text;
    EXPECT_NE(out.text.find("the compute governor failed under"), std::string::npos) << out.text;
    if (closed) {
      EXPECT_NE(out.text.find("which waited "), std::string::npos) << out.text;
      EXPECT_GT(MsAfter(out.text, "which waited "), 0u) << out.text;
      EXPECT_NE(out.text.find("(fail-closed)"), std::string::npos) << out.text;
    } else {
      EXPECT_NE(out.text.find("ran ungoverned (fail-open)"), std::string::npos) << out.text;
    }
  }
}

TEST_F(TesseraRunTest, LatencyCriticalWorkHoldsBestEffortOnTheSameGpu) {
  testutil::TempDir arbiter;
  const std::vector<std::string> common = {"--context-bytes", "0", "--arbiter-dir", arbiter.path()};
  std::vector<std::string> be = {TESSERA_CLI, "run", "--priority", "best-effort"};
  be.insert(be.end(), common.begin(), common.end());
  for (const char* a : {"--", TESSERA_HOOK_CLIENT, "dlopen", "spin", "3", "500"}) be.push_back(a);
  Process batch(be, {"LD_LIBRARY_PATH=" + std::string(TESSERA_FAKE_CUDA_DIR),
                     "TESSERA_FAKE_GPU_MEMORY=" + std::to_string(16 * kGiB),
                     "ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0", "PATH=/usr/bin:/bin"});
  std::vector<std::string> lc = {"--priority", "latency-critical"};
  lc.insert(lc.end(), common.begin(), common.end());
  for (const char* a : {"--", TESSERA_HOOK_CLIENT, "dlopen", "spin", "1.5", "500"}) lc.push_back(a);
  const Output realtime = Run(lc);
  const Output best_effort = batch.Wait();
  EXPECT_EQ(realtime.exit_code, 0) << realtime.text;
  EXPECT_EQ(best_effort.exit_code, 0) << best_effort.text;
  EXPECT_EQ(MsAfter(realtime.text, "held for priority "), 0u) << realtime.text;
  EXPECT_GT(MsAfter(best_effort.text, "held for priority "), 0u) << best_effort.text;
}

// Drift against the fake NVML: a tenant fills its cap, zeroes its (writable) region and allocates
// past the cap. The region now says 0; NVML's per-process figure says the truth, and
// `tessera drift` (the node agent's check) reports the container over its cap; a process outside
// every container is reported as unattributed.
TEST_F(HookTest, DriftSeesATenantThatRewroteItsRegion) {
  Limit(64 * kMiB);
  Process tenant({TESSERA_HOOK_CLIENT, "dlopen", "tamper", std::to_string(16 * kMiB)}, Env());
  struct KillAtEnd {
    Process& p;
    ~KillAtEnd() { p.Kill(); }
  } end_tenant{tenant};
  const std::string said = tenant.ReadUntil("HOLDING");
  ASSERT_NE(said.find("tamper_within=4 tamper_beyond=4"), std::string::npos) << said;
  Process outsider({TESSERA_HOOK_CLIENT, "dlopen", "hold", std::to_string(8 * kMiB)},
                   {"LD_LIBRARY_PATH=" + std::string(TESSERA_FAKE_CUDA_DIR),
                    "TESSERA_FAKE_STATE=" + fake_state_});
  KillAtEnd end_outsider{outsider};
  ASSERT_NE(outsider.ReadUntil("hold_result").find("hold_result"), std::string::npos);
  const Output drift = Process({TESSERA_CLI, "drift", dir_.path()},
                               {"LD_LIBRARY_PATH=" + std::string(TESSERA_FAKE_CUDA_DIR),
                                "TESSERA_FAKE_STATE=" + fake_state_})
                           .Wait();
  EXPECT_EQ(drift.exit_code, 1) << drift.text;  // over cap: the answer is "no"
  EXPECT_NE(drift.text.find("OVER CAP"), std::string::npos) << drift.text;
  EXPECT_NE(drift.text.find("NVML 128.00 MiB, region 16.00 MiB, cap 64.00 MiB, drift +112.00 MiB"),
            std::string::npos)
      << drift.text;
  EXPECT_NE(drift.text.find("UNATTRIBUTED"), std::string::npos) << drift.text;
  EXPECT_NE(drift.text.find("8.00 MiB outside every tessera container"), std::string::npos)
      << drift.text;
  // --json: the same findings (docs/protocol.md), the same answer.
  const Output json = Process({TESSERA_CLI, "drift", "--json", dir_.path()},
                              {"LD_LIBRARY_PATH=" + std::string(TESSERA_FAKE_CUDA_DIR),
                               "TESSERA_FAKE_STATE=" + fake_state_})
                          .Wait();
  EXPECT_EQ(json.exit_code, 1) << json.text;
  EXPECT_EQ(json.text.rfind("{\"containers\":[{", 0), 0u) << json.text;
  EXPECT_NE(json.text.find("\"capBytes\":67108864,\"regionBytes\":16777216,"
                           "\"nvmlBytes\":134217728,\"driftBytes\":117440512,\"overCap\":true"),
            std::string::npos)
      << json.text;
  EXPECT_NE(json.text.find("\"unattributed\":[{\"uuid\":"), std::string::npos) << json.text;
  EXPECT_NE(json.text.find("\"bytes\":8388608}"), std::string::npos) << json.text;
}

TEST_F(HookTest, DriftOfAnHonestTenantIsZero) {
  Limit(64 * kMiB);
  Process tenant({TESSERA_HOOK_CLIENT, "dlopen", "hold", std::to_string(16 * kMiB)}, Env());
  struct KillAtEnd {
    Process& p;
    ~KillAtEnd() { p.Kill(); }
  } end_tenant{tenant};
  ASSERT_NE(tenant.ReadUntil("hold_result").find("hold_result"), std::string::npos);
  const Output drift = Process({TESSERA_CLI, "drift", dir_.path()},
                               {"LD_LIBRARY_PATH=" + std::string(TESSERA_FAKE_CUDA_DIR),
                                "TESSERA_FAKE_STATE=" + fake_state_})
                           .Wait();
  EXPECT_EQ(drift.exit_code, 0) << drift.text;
  EXPECT_EQ(drift.text.rfind("ok ", 0), 0u) << drift.text;
  EXPECT_NE(drift.text.find("NVML 16.00 MiB, region 16.00 MiB, cap 64.00 MiB, drift +0 B"),
            std::string::npos)
      << drift.text;
}

// `tessera doctor` against the fake driver: every experiment runs in every mode asked for and ends;
// the fake's hog takes the whole device natively but only the cap under tessera; an unavailable
// MPS is reported, not crashed on; nothing is left behind in /tmp.
class DoctorTest : public HookTest {
 protected:
  Output Doctor(std::vector<std::string> args) {
    std::vector<std::string> argv = {TESSERA_CLI, "doctor"};
    argv.insert(argv.end(), args.begin(), args.end());
    return Process(argv, {"LD_LIBRARY_PATH=" + std::string(TESSERA_FAKE_CUDA_DIR),
                          "TESSERA_FAKE_STATE=" + fake_state_,
                          "TESSERA_FAKE_GPU_MEMORY=" + std::to_string(16 * kGiB),
                          "TESSERA_HOOK_LIBRARY=" + std::string(TESSERA_HOOK_LIBRARY),
                          "PATH=/usr/bin:/bin"})
        .Wait();
  }
  static std::set<std::string> DoctorFolders() {
    std::set<std::string> found;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/tmp", ec)) {
      if (e.path().filename().string().rfind("tessera-doctor-", 0) == 0) found.insert(e.path());
    }
    return found;
  }
  static const nlohmann::json* FindingOf(const nlohmann::json& report, const std::string& property,
                                         const std::string& mode) {
    for (const auto& f : report["findings"]) {
      if (f["property"] == property && f["mode"] == mode) return &f;
    }
    return nullptr;
  }
};

TEST_F(DoctorTest, MeasuresEveryModeAndJudgesTheTiers) {
  const auto before = DoctorFolders();
  const Output out = Doctor({"--modes", "native,shared,mps", "--json"});
  ASSERT_EQ(out.exit_code, 0) << out.text;
  const std::size_t start = out.text.find("{\"gpu\"");
  ASSERT_NE(start, std::string::npos) << out.text;
  const auto report =
      nlohmann::json::parse(out.text.substr(start, out.text.find('\n', start) - start));
  EXPECT_EQ(report["gpu"]["uuid"], kGpu0);
  EXPECT_EQ(report["modes"], nlohmann::json::array({"native", "shared"}));
  EXPECT_EQ(report["unavailable"][0], "mps: nvidia-cuda-mps-control not found");
  // Every property with a tier behind it was measured in both modes (none left "not-measured").
  for (const char* mode : {"native", "shared"}) {
    for (const char* property : {"memory-hog", "residual-exit", "residual-kill", "interference",
                                 "fault-isolation", "quota-honesty"}) {
      const auto* f = FindingOf(report, property, mode);
      ASSERT_NE(f, nullptr) << property << " " << mode;
      EXPECT_NE((*f)["holds"], "not-measured")
          << property << " " << mode << ": " << (*f)["measured"];
    }
  }
  // Natively the hog takes the whole device and the neighbour's next GiB is refused; under
  // tessera the hog stops at its cap (a quarter of the GPU) and the neighbour gets its GiB.
  EXPECT_EQ((*FindingOf(report, "memory-hog", "native"))["holds"], "no");
  EXPECT_EQ((*FindingOf(report, "memory-hog", "shared"))["holds"], "yes");
  EXPECT_EQ((*FindingOf(report, "memory-hog", "shared"))["values"]["hogBytes"], 4.0 * kGiB);
  // The fake's illegal-address kernel faults only its own tenant.
  EXPECT_EQ((*FindingOf(report, "fault-isolation", "native"))["values"]["faultResult"], 700);
  EXPECT_EQ((*FindingOf(report, "fault-isolation", "shared"))["holds"], "yes");
  // The cap is what a tenant is told under tessera; natively there is no cap to report.
  EXPECT_EQ((*FindingOf(report, "quota-honesty", "shared"))["holds"], "yes");
  EXPECT_EQ((*FindingOf(report, "quota-honesty", "native"))["holds"], "not-applicable");
  // The share is tessera's arbiter's: the capped burn does well under its solo rate (the fake's
  // 200 us kernels; how close to 30 % is for the GPU host's report, not for CI's clock).
  const auto share = FindingOf(report, "compute-share", "shared");
  ASSERT_NE((*share)["holds"], "not-measured") << share->dump();
  EXPECT_LT((*share)["values"]["deliveredPercent"].get<double>(), 80.0) << share->dump();
  // Regulated never shares; the other tiers' verdicts follow from the findings.
  bool regulated = false;
  for (const auto& v : report["verdicts"]) {
    EXPECT_EQ(v["mode"], "shared");
    if (v["tier"] == "regulated") regulated = v["safety"] == "not-safe";
  }
  EXPECT_TRUE(regulated);
  EXPECT_EQ(DoctorFolders(), before) << "a work folder was left in /tmp";
}

TEST_F(DoctorTest, BadFlagsNameTheFlagAndTheAcceptedValues) {
  const Output modes = Doctor({"--modes", "mig"});
  EXPECT_EQ(modes.exit_code, 2);
  EXPECT_NE(modes.text.find(
                "--modes: \"mig\" is not a mode doctor measures; accepted: native, shared, mps"),
            std::string::npos)
      << modes.text;
  const Output flag = Doctor({"--colour"});
  EXPECT_EQ(flag.exit_code, 2);
  EXPECT_NE(flag.text.find("--colour: unknown flag"), std::string::npos) << flag.text;
  const Output gpu = Doctor({"--gpu", "GPU-nonexistent", "--modes", "native"});
  EXPECT_EQ(gpu.exit_code, 5);  // unavailable
  EXPECT_NE(gpu.text.find("cannot reach the GPU \"GPU-nonexistent\""), std::string::npos)
      << gpu.text;
}

}  // namespace
}  // namespace tessera
