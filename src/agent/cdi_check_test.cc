#include "agent/cdi_check.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include "tessera/mountinfo.h"
#include "tessera/names.h"

#include "agent/fake_drift_api.h"

namespace tessera::agent {
namespace {

// One slot's container: pod team/job (the API's uid), container "main", on slot-3.
WatchedContainer Slot(const std::string& slot = "slot-3") {
  WatchedContainer c;
  c.id = slot;
  c.limits.pod = "team/job";
  c.limits.pod_uid = "uid-from-api";
  c.limits.container = "main";
  return c;
}

k8s::Json Running(const std::string& id, const std::string& name = "main") {
  return {{"status",
           {{"containerStatuses",
             {{{"name", "sidecar"},
               {"containerID", "containerd://other"},
               {"state", {{"running", {{"startedAt", "x"}}}}}},
              {{"name", name},
               {"containerID", "containerd://" + id},
               {"state", {{"running", {{"startedAt", "x"}}}}}}}}}}};
}

k8s::Json Waiting(const std::string& reason, const std::string& message) {
  return {{"status",
           {{"containerStatuses",
             {{{"name", "main"},
               {"state", {{"waiting", {{"reason", reason}, {"message", message}}}}}}}}}}};
}

class CdiCheckTest : public ::testing::Test {
 protected:
  CdiCheck& Make() {
    CdiCheckDeps d;
    d.containers = [this] { return containers_; };
    d.api = &api_;
    d.pids_of = [this](std::string_view id) {
      asked_ids_.emplace_back(id);
      const auto it = pids_.find(std::string(id));
      return it == pids_.end() ? std::vector<unsigned int>{} : it->second;
    };
    d.spec_mounted = [this](unsigned int pid) -> std::optional<bool> {
      const auto it = mounted_.find(pid);
      if (it == mounted_.end()) return std::nullopt;
      return it->second;
    };
    d.spec_path = [](std::string_view slot) {
      return "/cdi/tessera.dev-gpu-" + std::string(slot) + ".json";
    };
    d.exists = [this](const std::string& path) { return specs_.count(path) != 0; };
    d.now = [this] { return now_; };
    check_.emplace(std::move(d));
    return *check_;
  }

  std::vector<WatchedContainer> containers_{Slot()};
  FakeApi api_;
  std::map<std::string, std::vector<unsigned int>> pids_;
  std::map<unsigned int, bool> mounted_;
  std::set<std::string> specs_;
  std::vector<std::string> asked_ids_;
  CdiCheckDeps::Clock::time_point now_{};
  std::optional<CdiCheck> check_;
};

TEST_F(CdiCheckTest, AContainerWithItsSpecMountedIsVerifiedAndNotReadAgainUntilTheRecheck) {
  api_.pod_fields = Running("abc");
  pids_["abc"] = {101, 102};
  mounted_ = {{101, true}, {102, true}};
  CdiCheck& check = Make();
  check.Pass();
  EXPECT_TRUE(api_.events.empty());
  EXPECT_EQ(asked_ids_,
            std::vector<std::string>{"abc"});  // the named container's, not the sidecar's
  // Verified: not read again until the recheck is due.
  check.Pass();
  EXPECT_EQ(api_.gets.size(), 1u);
  now_ += CdiCheck::kRecheck;
  check.Pass();
  EXPECT_EQ(api_.gets.size(), 2u);
}

TEST_F(CdiCheckTest, AContainerWithoutItsSpecIsToldOncePerContainerAndTheNodeOnce) {
  api_.pod_fields = Running("abc");
  pids_["abc"] = {101, 102};
  mounted_ = {{102, false}};  // 101: cannot be told; the next process's mount table says it
  CdiCheck& check = Make();
  check.Pass();
  const auto pod = api_.Of(names::kEventCdiNotApplied);
  ASSERT_EQ(pod.size(), 2u);
  EXPECT_EQ(pod[0].target, "Pod team/job");
  EXPECT_NE(pod[0].message.find("tessera.dev/gpu=slot-3"), std::string::npos) << pod[0].message;
  EXPECT_NE(pod[0].message.find("enable_cdi"), std::string::npos) << pod[0].message;
  EXPECT_EQ(pod[1].target, "Node");
  EXPECT_EQ(check.not_applied(), 1u);
  // Read again after the recheck, told no more for the same container.
  check.Pass();
  EXPECT_EQ(api_.gets.size(), 1u);
  now_ += CdiCheck::kRecheck;
  check.Pass();
  EXPECT_EQ(api_.gets.size(), 2u);
  EXPECT_EQ(api_.events.size(), 2u);
  // Its restart (a new container ID) is told again; the Node only once.
  api_.pod_fields = Running("def");
  pids_["def"] = {104};
  mounted_ = {{104, false}};
  now_ += CdiCheck::kRecheck;
  check.Pass();
  EXPECT_EQ(api_.Of(names::kEventCdiNotApplied).size(), 3u);
  EXPECT_EQ(check.not_applied(), 2u);
  // Once the runtime applies it (a restart after the fix), verified; one process that changed
  // its mount namespace does not undo that.
  api_.pod_fields = Running("ghi");
  pids_["ghi"] = {105, 106};
  mounted_ = {{105, false}, {106, true}};
  now_ += CdiCheck::kRecheck;
  check.Pass();
  EXPECT_EQ(api_.gets.size(), 4u);
  EXPECT_EQ(api_.events.size(), 3u);
}

TEST_F(CdiCheckTest, AContainerNotRunningYetIsReadAgainAfterAGrowingWait) {
  api_.pod_fields = Waiting("ContainerCreating", "");
  CdiCheck& check = Make();
  for (int second = 0; second <= 60; ++second) {  // reads at 0, 5, 15, 35 s
    check.Pass();
    now_ += std::chrono::seconds(1);
  }
  EXPECT_EQ(api_.gets.size(), 4u);
  for (int second = 0; second < 600; ++second) {  // then once a minute at most
    check.Pass();
    now_ += std::chrono::seconds(1);
  }
  EXPECT_LE(api_.gets.size(), 4u + 11u);
  EXPECT_GE(api_.gets.size(), 4u + 9u);
}

TEST_F(CdiCheckTest, ASlotHandedToAnotherPodIsCheckedAfresh) {
  const std::string refused =
      "failed to create containerd container: CDI device injection failed: unresolvable CDI "
      "devices tessera.dev/gpu=slot-3";
  api_.pod_fields = Waiting("CreateContainerError", refused);
  CdiCheck& check = Make();
  check.Pass();
  ASSERT_EQ(api_.Of(names::kEventCdiUnresolved).size(), 1u);
  WatchedContainer next = Slot();
  next.limits.pod_uid = "uid-2";
  containers_ = {next};
  api_.pod_fields["metadata"] = {{"namespace", "team"}, {"name", "job"}, {"uid", "uid-2"}};
  check.Pass();
  EXPECT_EQ(api_.Of(names::kEventCdiUnresolved).size(), 2u);
}

TEST(CdiCheckCgroup, TheContainersOwnCgroupOnly) {
  const std::string id = "0123abcd";
  EXPECT_TRUE(CgroupNamesContainer("4:pids:/kubepods/besteffort/pod1/0123abcd\n", id));
  EXPECT_TRUE(CgroupNamesContainer(
      "1:name=systemd:/x\n0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-0123abcd.scope",
      id));
  EXPECT_TRUE(CgroupNamesContainer("0::/kubepods.slice/x/crio-0123abcd.scope", id));
  // CRI-O's monitor of the container lives in the host's mount namespace.
  EXPECT_FALSE(CgroupNamesContainer("0::/kubepods.slice/x/crio-conmon-0123abcd.scope", id));
  EXPECT_FALSE(CgroupNamesContainer("4:pids:/kubepods/besteffort/pod1/0123abcdef", id));
  EXPECT_FALSE(CgroupNamesContainer("4:pids:/kubepods/besteffort/pod0123abcd/other", id));
  EXPECT_FALSE(CgroupNamesContainer("4:pids:/kubepods/besteffort/pod1/0123abcd\n", ""));
}

TEST_F(CdiCheckTest, NothingIsDoneWhileNoProcessCanBeAsked) {
  api_.pod_fields = Running("abc");
  pids_["abc"] = {101};  // e.g. the runtime's init process: unknown
  CdiCheck& check = Make();
  check.Pass();
  EXPECT_TRUE(api_.events.empty());
  // Asked again after a wait (nothing concluded).
  check.Pass();
  EXPECT_EQ(api_.gets.size(), 1u);
  now_ += CdiCheck::kRetry;
  check.Pass();
  EXPECT_EQ(api_.gets.size(), 2u);
}

TEST_F(CdiCheckTest, ANotRunningUnknownOrRenamedPodIsLeftAlone) {
  CdiCheck& check = Make();
  api_.pod_error = NotFoundError("pods \"job\" not found");
  check.Pass();
  api_.pod_error = Status::Ok();
  api_.pod_fields = {{"metadata", {{"namespace", "team"}, {"name", "job"}, {"uid", "another"}}}};
  api_.pod_fields.update(Running("abc"));
  pids_["abc"] = {101};
  mounted_ = {{101, false}};
  now_ += CdiCheck::kRecheck;
  check.Pass();  // same name, another pod: not this slot's container
  api_.pod_fields = Running("abc", "not-main");
  now_ += CdiCheck::kRecheck;
  check.Pass();  // no status of its container
  api_.pod_fields = Waiting("ContainerCreating", "");
  now_ += CdiCheck::kRecheck;
  check.Pass();
  api_.pod_fields = Waiting("CreateContainerError", "image has no entrypoint (in /cdi/x)");
  now_ += CdiCheck::kRecheck;
  check.Pass();  // an error that names no CDI device
  EXPECT_EQ(api_.gets.size(), 5u);
  EXPECT_TRUE(api_.events.empty());
}

TEST_F(CdiCheckTest, AnUnresolvableDeviceIsToldOnceWithWhereTheSpecIs) {
  api_.pod_fields = Waiting("CreateContainerError",
                            "failed to create containerd container: CDI device injection failed: "
                            "unresolvable CDI devices tessera.dev/gpu=slot-3");
  CdiCheck& check = Make();
  check.Pass();
  check.Pass();
  auto told = api_.Of(names::kEventCdiUnresolved);
  ASSERT_EQ(told.size(), 1u);
  EXPECT_NE(told[0].message.find("/cdi/tessera.dev-gpu-slot-3.json and it is missing"),
            std::string::npos)
      << told[0].message;
  EXPECT_NE(told[0].message.find("unresolvable CDI devices"), std::string::npos);
  // With the spec there, the message says the runtime's folders are the fault.
  specs_.insert("/cdi/tessera.dev-gpu-slot-4.json");
  containers_ = {Slot("slot-4")};
  check.Pass();
  told = api_.Of(names::kEventCdiUnresolved);
  ASSERT_EQ(told.size(), 2u);
  EXPECT_NE(told[1].message.find("(it is there"), std::string::npos) << told[1].message;
  // An error that does not name CDI is not ours to explain.
  containers_ = {Slot("slot-5")};
  api_.pod_fields = Waiting("CreateContainerError", "image has no entrypoint");
  check.Pass();
  EXPECT_EQ(api_.Of(names::kEventCdiUnresolved).size(), 2u);
}

// The production readers on this process: its own cgroup names no container, its mount table no
// slot's spec.
TEST(CdiCheckProc, ReadsThisProcesssMountTable) {
  EXPECT_TRUE(ProcPidsOfContainer("").empty());
  EXPECT_TRUE(ProcPidsOfContainer("no-such-container-id-0123456789").empty());
  const std::optional<bool> self = ProcCdiSpecMounted(static_cast<unsigned int>(getpid()));
  ASSERT_TRUE(self.has_value());
  EXPECT_FALSE(*self);  // no slot's spec here
  EXPECT_FALSE(ProcCdiSpecMounted(0).has_value());
}

TEST(MountInfo, FindsAMountPointByItsFifthField) {
  constexpr std::string_view kTable =
      "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
      "30 22 8:1 /var/lib/tessera/slots/slot-3/etc /etc/tessera ro - ext4 /dev/sda1 ro\n"
      "31 22 0:5 / /etc/tessera-other rw - tmpfs tmpfs rw";
  static_assert(MountPointIn(kTable, "/etc/tessera"));
  EXPECT_TRUE(MountPointIn(kTable, "/"));
  EXPECT_FALSE(MountPointIn(kTable, "/etc"));
  EXPECT_FALSE(
      MountPointIn(kTable, "/var/lib/tessera/slots/slot-3/etc"));  // a root, not a mount point
  EXPECT_TRUE(MountPointIn(kTable, "/etc/tessera-other"));
  EXPECT_FALSE(MountPointIn("", "/etc/tessera"));
  EXPECT_FALSE(MountPointIn("garbage without fields", "/etc/tessera"));
}

}  // namespace
}  // namespace tessera::agent
