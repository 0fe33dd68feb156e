#include "agent/slot_binder.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "tessera/names.h"
#include "tessera/region.h"

#include "testutil/status_matchers.h"
#include "testutil/temp_dir.h"

namespace tessera::agent {
namespace {

constexpr char kGpu[] = "GPU-aaaa0000-0000-0000-0000-000000000001";
constexpr std::uint64_t kGiB = 1ULL << 30;

// kubelet's PodResources as a table (our own interface; the e2e test drives the real one).
class TableOwners : public DeviceOwners {
 public:
  std::map<std::string, DeviceOwner> held;
  StatusOr<std::optional<DeviceOwner>> OwnerOf(std::string_view resource,
                                               std::string_view device) override {
    EXPECT_EQ(resource, names::kResourceGpuSlot);
    auto it = held.find(std::string(device));
    return it == held.end() ? std::optional<DeviceOwner>() : std::optional<DeviceOwner>(it->second);
  }
  StatusOr<std::set<std::string>> HeldDevices(std::string_view) override {
    std::set<std::string> ids;
    for (const auto& [id, owner] : held) ids.insert(id);
    return ids;
  }
};

class TablePods : public PodApi {
 public:
  std::map<std::string, k8s::Json> pods;                      // "ns/name"
  std::vector<std::pair<std::string, std::string>> warnings;  // (reason, message)
  StatusOr<k8s::Json> GetPod(std::string_view ns, std::string_view name) override {
    auto it = pods.find(std::string(ns) + "/" + std::string(name));
    if (it == pods.end()) return NotFoundError("pods \"" + std::string(name) + "\" not found");
    return it->second;
  }
  void WarnPod(const k8s::Json&, std::string_view reason, std::string_view message) override {
    warnings.emplace_back(reason, message);
  }
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class SlotBinderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto pem = contract::GenerateSigningKeyPem();
    ASSERT_OK(pem);
    auto signer = contract::Signer::FromPem(*pem);
    ASSERT_OK(signer);
    signer_ = std::make_unique<contract::Signer>(std::move(*signer));
    auto verifier = contract::Verifier::FromPem(signer_->PublicKeyPem());
    ASSERT_OK(verifier);
    BinderOptions o;
    o.node_name = "n1";
    o.state_dir = dir_.path() + "/state";
    o.cdi_dir = dir_.path() + "/cdi";
    o.hook_library = "/opt/tessera/libtessera-cuda.so";
    o.ld_so_preload = dir_.path() + "/state/ld.so.preload";
    o.driver.files = {"/usr/lib/libcuda.so.1"};
    o.policy = policy::DefaultPolicy();
    o.release_grace = std::chrono::milliseconds(0);
    o.keys["k1"] = std::make_shared<contract::Verifier>(std::move(*verifier));
    std::filesystem::create_directories(o.cdi_dir);
    mps_ = std::make_unique<governor::NodeMps>(dir_.path() + "/state/mps", "no-such-mps-control");
    o.mps = mps_.get();
    binder_ = std::make_unique<SlotBinder>(o, &owners_, &pods_);
    binder_->SetGpus({{kGpu, BinderGpu{3, true, true, "", 512ULL << 20, 573440}}});
  }

  contract::Decision DecisionFor(const std::string& name) {
    contract::Decision d;
    d.pod_uid = "uid-" + name;
    d.pod_namespace = "ml";
    d.pod_name = name;
    d.node = "n1";
    d.tier = TrustTier::kDepartment;
    d.issued_at = "2026-11-30T00:00:00Z";
    d.key_id = "k1";
    d.containers = {{"main", SharingMode::kShared, {{kGpu, 4 * kGiB, 30}}}};
    return d;
  }

  // A pod holding `slot`, carrying `decision` signed (or with `signature` when given).
  void AddPod(const std::string& slot, const contract::Decision& decision, std::string text = "",
              std::string signature = "") {
    if (text.empty()) text = contract::EncodeDecision(decision);
    if (signature.empty()) signature = *signer_->Sign(text);
    pods_.pods["ml/" + decision.pod_name] = {
        {"metadata",
         {{"name", decision.pod_name},
          {"namespace", "ml"},
          {"uid", "uid-" + decision.pod_name},
          {"annotations",
           {{std::string(names::kAnnotationDecision), text},
            {std::string(names::kAnnotationDecisionSignature), signature}}}}}};
    owners_.held[slot] = {"ml", decision.pod_name, "main"};
  }

  // A binder that keeps a slot's files for an hour after it was allocated or prepared.
  BinderOptions PatientOptions() {
    BinderOptions o;
    o.node_name = "n1";
    o.state_dir = dir_.path() + "/state";
    o.cdi_dir = dir_.path() + "/cdi";
    o.policy = policy::DefaultPolicy();
    o.release_grace = std::chrono::hours(1);
    return o;
  }

  SlotPaths Paths(const std::string& slot) {
    return PathsOf(dir_.path() + "/state", dir_.path() + "/cdi", slot);
  }

  void ExpectRefused(const std::string& slot, const std::string& why) {
    ASSERT_OK(binder_->Allocate(slot));
    const Status s = binder_->Prepare(slot);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find(why), std::string::npos) << s.message();
    EXPECT_FALSE(std::filesystem::exists(Paths(slot).limits))
        << "a refused slot must have no limits";
    EXPECT_FALSE(std::filesystem::exists(Paths(slot).cdi_spec));
    ASSERT_FALSE(pods_.warnings.empty());
    EXPECT_EQ(pods_.warnings.back().first, names::kEventDecisionRejected);
    EXPECT_NE(pods_.warnings.back().second.find(why), std::string::npos);
  }

  testutil::TempDir dir_;
  std::unique_ptr<governor::NodeMps> mps_;
  std::unique_ptr<contract::Signer> signer_;
  TableOwners owners_;
  TablePods pods_;
  std::unique_ptr<SlotBinder> binder_;
};

TEST_F(SlotBinderTest, AVerifiedDecisionBecomesTheSlotsLimitsRegionAndCdiSpec) {
  AddPod("slot-0007", DecisionFor("train"));
  ASSERT_OK(binder_->Allocate("slot-0007"));
  ASSERT_OK(binder_->Prepare("slot-0007"));
  const SlotPaths p = Paths("slot-0007");
  auto limits = ParseLimitsFile(Slurp(p.limits));
  ASSERT_OK(limits);
  EXPECT_EQ(limits->pod, "ml/train");
  EXPECT_EQ(limits->pod_uid, "uid-train");
  EXPECT_EQ(limits->container, "main");
  EXPECT_TRUE(limits->fail_closed);  // department: fail-closed in the default policy
  ASSERT_EQ(limits->devices.size(), 1u);
  EXPECT_EQ(limits->devices[0].uuid, kGpu);
  EXPECT_EQ(limits->devices[0].memory_bytes, 4 * kGiB);
  EXPECT_EQ(limits->devices[0].cores_percent, 30u);
  EXPECT_EQ(limits->devices[0].context_bytes, 512ULL << 20);
  EXPECT_EQ(limits->devices[0].stream_bytes, 573440u);
  EXPECT_EQ(limits->compute, ComputeMode::kHard);
  EXPECT_EQ(limits->compute_window_ms, 0u);
  EXPECT_EQ(std::filesystem::status(p.limits).permissions() & std::filesystem::perms::owner_write,
            std::filesystem::perms::none);
  auto region = shm::Mapping::Attach(p.region);
  ASSERT_OK(region);
  const std::string spec = Slurp(p.cdi_spec);
  EXPECT_NE(spec.find("\"kind\":\"tessera.dev/gpu\""), std::string::npos) << spec;
  EXPECT_NE(spec.find("\"name\":\"slot-0007\""), std::string::npos);
  EXPECT_NE(spec.find("\"path\":\"/dev/nvidia3\""), std::string::npos);
  EXPECT_NE(spec.find("/usr/lib/libcuda.so.1"), std::string::npos);
  // The spec mounts itself (how the node tells the runtime applied it: agent/cdi_check.h).
  EXPECT_NE(spec.find("{\"hostPath\":\"" + p.cdi_spec + "\",\"containerPath\":\"" +
                      std::string(names::kPathCdiSpecInContainer) + "\",\"options\":[\"ro\""),
            std::string::npos)
      << spec;
  EXPECT_TRUE(pods_.warnings.empty());
}

// Mode mps needs the pod's user ID and the node's MPS daemon; without either the container gets
// no GPU and a reason (the daemon itself runs only where nvidia-cuda-mps-control exists: the
// GPU host's test/gpu/mps_users.sh and mps_namespaces.sh).
TEST_F(SlotBinderTest, MpsNeedsTheUserAndTheNodesMpsDaemon) {
  contract::Decision d = DecisionFor("mps-a");
  d.tier = TrustTier::kTeam;  // the default policy allows mps for teams only
  d.containers[0].mode = SharingMode::kMps;
  AddPod("slot-0003", d);
  ExpectRefused("slot-0003", "annotation tessera.dev/mps-user must name the numeric user ID");
  d = DecisionFor("mps-b");
  d.tier = TrustTier::kTeam;
  d.containers[0].mode = SharingMode::kMps;
  AddPod("slot-0004", d);
  pods_.pods["ml/mps-b"]["metadata"]["annotations"][std::string(names::kAnnotationMpsUser)] =
      "1000";
  ExpectRefused("slot-0004", "mode mps: no-such-mps-control not found on this node");
}

// A driver installed on the host: its device nodes are the container's. A driver container's
// (dev root /run/nvidia/driver): the same nodes at /dev in the container, from under its root.
TEST(Slots, DeviceNodesComeFromUnderTheDriversRoot) {
  const std::string host = CdiSpec("slot-0001", {2}, CdiDriver{{"/usr/lib/libcuda.so.1"}, "/"});
  EXPECT_NE(host.find("\"deviceNodes\":[{\"path\":\"/dev/nvidia2\"}]"), std::string::npos) << host;
  EXPECT_EQ(host.find("hostPath\":\"/dev"), std::string::npos) << host;
  const std::string rooted = CdiSpec("slot-0001", {2}, CdiDriver{{}, "/run/nvidia/driver/"});
  EXPECT_NE(rooted.find("{\"path\":\"/dev/nvidia2\",\"hostPath\":\"/run/nvidia/driver/dev/"
                        "nvidia2\"}"),
            std::string::npos)
      << rooted;
  EXPECT_NE(rooted.find("{\"path\":\"/dev/nvidiactl\",\"hostPath\":\"/run/nvidia/driver/dev/"
                        "nvidiactl\"}"),
            std::string::npos)
      << rooted;
}

TEST(Slots, AnMpsContainersCdiDeviceCarriesThePipeFolderAndTheClientEnvironment) {
  const std::string spec = CdiSpec(
      "slot-0002", {1}, CdiDriver{},
      {{std::string(kMpsPipeInContainer), "/var/lib/tessera/mps/GPU-a/pipe", false}},
      {"CUDA_MPS_PIPE_DIRECTORY=/run/tessera-mps/pipe", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30"});
  EXPECT_NE(spec.find("\"env\":[\"CUDA_MPS_PIPE_DIRECTORY=/run/tessera-mps/"
                      "pipe\",\"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30\"]"),
            std::string::npos)
      << spec;
  EXPECT_NE(spec.find("\"hostPath\":\"/var/lib/tessera/mps/GPU-a/pipe\",\"containerPath\":\"/run/"
                      "tessera-mps/pipe\",\"options\":[\"rw\""),
            std::string::npos)
      << spec;
  EXPECT_EQ(CdiSpec("slot-0002", {1}, {}).find("\"env\""), std::string::npos);  // shared mode: none
}

TEST_F(SlotBinderTest, AllocateAnswersMountsEnvironmentAndTheSlotsCdiDevice) {
  const SlotAllocation a = binder_->AllocationOf("slot-0001");
  EXPECT_EQ(a.cdi_device, "tessera.dev/gpu=slot-0001");
  bool limits_ro = false, run_rw = false, preload = false;
  for (const Mount& m : a.mounts) {
    limits_ro |= m.container_path == "/etc/tessera" && m.host_path == Paths("slot-0001").etc_dir &&
                 m.read_only;
    run_rw |= m.container_path == "/run/tessera" && !m.read_only;
    preload |= m.container_path == "/etc/ld.so.preload" && m.read_only;
  }
  EXPECT_TRUE(limits_ro && run_rw && preload);
}

// A whole-GPU ask of two GPUs (mode exclusive): one slot, both GPUs' device nodes in its CDI
// device, both GPUs in its limits file.
TEST_F(SlotBinderTest, AWholeGpuAskGetsEveryDecidedGpusDeviceNode) {
  const std::string second = "GPU-bbbbbbbb-0000-0000-0000-000000000002";
  binder_->SetGpus({{kGpu, BinderGpu{3, true, true, "", 512ULL << 20, 573440}},
                    {second, BinderGpu{5, true, true, "", 512ULL << 20, 573440}}});
  contract::Decision d = DecisionFor("whole");
  d.tier = TrustTier::kRegulated;
  d.containers = {
      {"main", SharingMode::kExclusive, {{kGpu, 80 * kGiB, 100}, {second, 80 * kGiB, 100}}}};
  AddPod("slot-0005", d);
  ASSERT_OK(binder_->Allocate("slot-0005"));
  ASSERT_OK(binder_->Prepare("slot-0005"));
  const std::string spec = Slurp(Paths("slot-0005").cdi_spec);
  EXPECT_NE(spec.find("\"deviceNodes\":[{\"path\":\"/dev/nvidia3\"},{\"path\":\"/dev/nvidia5\"}]"),
            std::string::npos)
      << spec;
  auto limits = ParseLimitsFile(Slurp(Paths("slot-0005").limits));
  ASSERT_OK(limits);
  ASSERT_EQ(limits->devices.size(), 2u);
  EXPECT_EQ(limits->mode, SharingMode::kExclusive);
}

TEST_F(SlotBinderTest, TheDecisionsComputeModeAndPeriodReachTheLimitsFile) {
  contract::Decision d = DecisionFor("batch");
  d.containers[0].compute_window_ms = 1000;
  AddPod("slot-0003", d);
  ASSERT_OK(binder_->Allocate("slot-0003"));
  ASSERT_OK(binder_->Prepare("slot-0003"));
  auto limits = ParseLimitsFile(Slurp(Paths("slot-0003").limits));
  ASSERT_OK(limits);
  EXPECT_EQ(limits->compute, ComputeMode::kHard);
  EXPECT_EQ(limits->compute_window_ms, 1000u);
}

TEST_F(SlotBinderTest, EveryBadDecisionIsRefusedWithAReasonAndNoGpu) {
  contract::Decision d = DecisionFor("a");
  AddPod("slot-0001", d, "", "AAAA");
  ExpectRefused("slot-0001", "the decision's signature");

  d = DecisionFor("b");
  AddPod("slot-0002", d, "{\"apiVersion\":\"tessera.dev/decision/v1\",\"pod\":");
  ExpectRefused("slot-0002", "the decision is malformed");

  d = DecisionFor("c");
  d.key_id = "k9";
  AddPod("slot-0003", d);
  ExpectRefused("slot-0003", "signed with key \"k9\", which this node does not hold");

  d = DecisionFor("d");
  d.pod_uid = "uid-someone-else";
  AddPod("slot-0004", d);
  ExpectRefused("slot-0004", "for pod uid uid-someone-else, not this pod");

  d = DecisionFor("e");
  d.node = "n2";
  AddPod("slot-0005", d);
  ExpectRefused("slot-0005", "for node n2, not n1");

  d = DecisionFor("f");
  d.containers[0].name = "sidecar";
  AddPod("slot-0006", d);
  ExpectRefused("slot-0006", "no entry for container \"main\"");

  d = DecisionFor("g");
  d.containers[0].devices[0].uuid = "GPU-elsewhere";
  AddPod("slot-0008", d);
  ExpectRefused("slot-0008", "names GPU GPU-elsewhere, which this node does not have");

  pods_.pods["ml/h"] = {{"metadata", {{"name", "h"}, {"namespace", "ml"}, {"uid", "uid-h"}}}};
  owners_.held["slot-0009"] = {"ml", "h", "main"};
  ExpectRefused("slot-0009", "has no tessera.dev/decision annotation");
}

TEST_F(SlotBinderTest, AnUnhealthyGpuIsNeverHandedOut) {
  binder_->SetGpus({{kGpu, BinderGpu{3, true, false, "XID 79", 0, 0}}});
  AddPod("slot-0001", DecisionFor("train"));
  ExpectRefused("slot-0001", "unhealthy (XID 79)");
}

TEST_F(SlotBinderTest, ASlotNobodyHoldsIsRefusedWithoutTouchingAnyPod) {
  ASSERT_OK(binder_->Allocate("slot-0003"));
  const Status s = binder_->Prepare("slot-0003");
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  EXPECT_TRUE(pods_.warnings.empty());
  EXPECT_FALSE(binder_->Prepare("gpu-0").ok());  // not a slot at all
}

TEST_F(SlotBinderTest, AReusedSlotNeverKeepsThePreviousContainersLimits) {
  AddPod("slot-0001", DecisionFor("first"));
  ASSERT_OK(binder_->Allocate("slot-0001"));
  ASSERT_OK(binder_->Prepare("slot-0001"));
  contract::Decision next = DecisionFor("second");
  next.node = "n2";  // refused
  AddPod("slot-0001", next);
  ExpectRefused("slot-0001", "for node n2");
}

TEST_F(SlotBinderTest, ReleasedSlotsLoseTheirFilesHeldOnesKeepThem) {
  AddPod("slot-0001", DecisionFor("kept"));
  AddPod("slot-0002", DecisionFor("gone"));
  for (const char* slot : {"slot-0001", "slot-0002"}) {
    ASSERT_OK(binder_->Allocate(slot));
    ASSERT_OK(binder_->Prepare(slot));
  }
  owners_.held.erase("slot-0002");
  auto removed = binder_->RemoveReleased();
  ASSERT_OK(removed);
  EXPECT_EQ(*removed, 1);
  EXPECT_TRUE(std::filesystem::exists(Paths("slot-0001").limits));
  EXPECT_FALSE(std::filesystem::exists(Paths("slot-0002").dir));
  EXPECT_FALSE(std::filesystem::exists(Paths("slot-0002").cdi_spec));
}

// A held slot whose folder has no limits file (kubelet never called PreStartContainer, or the
// node's files were removed under the container): written again from the decision, the pod told
// once; a container whose decision was refused is not tried (nor told) again.
TEST_F(SlotBinderTest, AHeldSlotWithoutItsLimitsIsWrittenAgainAndThePodTold) {
  AddPod("slot-0001", DecisionFor("nostart"));
  ASSERT_OK(binder_->Allocate("slot-0001"));  // no Prepare: PreStartContainer never came
  AddPod("slot-0002", DecisionFor("wiped"));
  ASSERT_OK(binder_->Allocate("slot-0002"));
  ASSERT_OK(binder_->Prepare("slot-0002"));
  std::filesystem::remove(Paths("slot-0002").limits);
  {  // the running container's usage, in the region it mapped
    auto region = shm::Mapping::Attach(Paths("slot-0002").region);
    ASSERT_OK(region);
    region->region()->devices[0].used_bytes.store(3 * kGiB);
  }
  contract::Decision refused = DecisionFor("refused");
  refused.node = "n2";
  AddPod("slot-0003", refused);
  ExpectRefused("slot-0003", "for node n2");
  pods_.warnings.clear();

  auto restored = binder_->RestoreHeld();  // the first pass finds them missing ...
  ASSERT_OK(restored);
  EXPECT_EQ(*restored, 0);
  EXPECT_FALSE(std::filesystem::exists(Paths("slot-0001").limits));
  restored = binder_->RestoreHeld();  // ... the second, still missing, writes them
  ASSERT_OK(restored);
  EXPECT_EQ(*restored, 2);
  for (const char* slot : {"slot-0001", "slot-0002"}) {
    EXPECT_TRUE(std::filesystem::exists(Paths(slot).limits)) << slot;
    EXPECT_TRUE(std::filesystem::exists(Paths(slot).cdi_spec)) << slot;
  }
  EXPECT_FALSE(std::filesystem::exists(Paths("slot-0003").limits));
  {  // the same region: its usage kept
    auto region = shm::Mapping::Attach(Paths("slot-0002").region);
    ASSERT_OK(region);
    EXPECT_EQ(region->region()->devices[0].used_bytes.load(), 3 * kGiB);
  }
  ASSERT_EQ(pods_.warnings.size(), 2u);
  for (const auto& [reason, message] : pods_.warnings) {
    EXPECT_EQ(reason, names::kEventLimitsMissing);
    EXPECT_NE(message.find("refused the GPU (fail closed)"), std::string::npos) << message;
  }

  // Removed again under the same container: it was told once, so it is not rewritten again
  // (whatever removes it keeps doing so); nothing else changes.
  std::filesystem::remove(Paths("slot-0002").limits);
  for (int pass = 0; pass < 2; ++pass) {
    restored = binder_->RestoreHeld();
    ASSERT_OK(restored);
    EXPECT_EQ(*restored, 0);
  }
  EXPECT_EQ(pods_.warnings.size(), 2u);

  // Another pod on the slot is another container: tried again; the region left by the previous
  // one is not its decision's (2 GiB, not 4), so it gets a fresh one.
  {
    auto region = shm::Mapping::Create(Paths("slot-0002").region, {{kGpu, 2 * kGiB, 30}});
    ASSERT_OK(region);
    region->region()->devices[0].used_bytes.store(1 * kGiB);
  }
  AddPod("slot-0002", DecisionFor("next"));
  restored = binder_->RestoreHeld();
  ASSERT_OK(restored);
  EXPECT_EQ(*restored, 1);
  EXPECT_TRUE(std::filesystem::exists(Paths("slot-0002").limits));
  auto region = shm::Mapping::Attach(Paths("slot-0002").region);
  ASSERT_OK(region);
  EXPECT_EQ(region->region()->devices[0].limit_bytes, 4 * kGiB);
  EXPECT_EQ(region->region()->devices[0].used_bytes.load(), 0u);
}

// An API error while restoring is not a try: the next pass tries again, and tells the pod then.
TEST_F(SlotBinderTest, ARestoreTheApiServerDidNotAnswerIsTriedAgain) {
  AddPod("slot-0001", DecisionFor("later"));
  ASSERT_OK(binder_->Allocate("slot-0001"));
  const k8s::Json pod = pods_.pods.at("ml/later");
  pods_.pods.erase("ml/later");  // GetPod fails
  for (int pass = 0; pass < 3; ++pass) {
    auto restored = binder_->RestoreHeld();
    ASSERT_OK(restored);
    EXPECT_EQ(*restored, 0);
  }
  EXPECT_TRUE(pods_.warnings.empty());
  pods_.pods["ml/later"] = pod;
  auto restored = binder_->RestoreHeld();
  ASSERT_OK(restored);
  EXPECT_EQ(*restored, 1);
  ASSERT_EQ(pods_.warnings.size(), 1u);
  EXPECT_EQ(pods_.warnings[0].first, names::kEventLimitsMissing);
}

// A slot just allocated waits for its PreStartContainer (release_grace) before it is restored.
TEST_F(SlotBinderTest, ASlotJustAllocatedIsNotRestoredBeforeItsPreStart) {
  SlotBinder binder(PatientOptions(), &owners_, &pods_);
  AddPod("slot-0004", DecisionFor("soon"));
  ASSERT_OK(binder.Allocate("slot-0004"));
  for (int pass = 0; pass < 2; ++pass) {
    auto restored = binder.RestoreHeld();
    ASSERT_OK(restored);
    EXPECT_EQ(*restored, 0);
  }
  EXPECT_FALSE(std::filesystem::exists(Paths("slot-0004").limits));
  EXPECT_TRUE(pods_.warnings.empty());
}

// kubelet records an allocation only after Allocate answers: a clean-up pass whose list of held
// slots predates it must not remove the files of a slot just allocated or prepared.
TEST_F(SlotBinderTest, ASlotJustAllocatedKeepsItsFilesUntilKubeletListsIt) {
  SlotBinder binder(PatientOptions(), &owners_, &pods_);
  ASSERT_OK(binder.Allocate("slot-0005"));  // not held: kubelet has not recorded it yet
  auto removed = binder.RemoveReleased();
  ASSERT_OK(removed);
  EXPECT_EQ(*removed, 0);
  EXPECT_TRUE(std::filesystem::exists(Paths("slot-0005").etc_dir));
}

TEST(Slots, IdsRoundTripAndAnythingElseIsRefused) {
  EXPECT_EQ(SlotId(42), "slot-0042");
  EXPECT_EQ(*ParseSlotId("slot-0042"), 42);
  for (const char* bad : {"slot-42", "slot-00a2", "GPU-1-s01", "", "slot-00421", "../etc"}) {
    EXPECT_FALSE(ParseSlotId(bad).ok()) << bad;
  }
}

// A best-effort MPS container's SM limit leaves the latency-critical ones on its GPU what they
// ask for: the binder sums the shares of their slots' limits files (other GPUs, other classes,
// shared mode and the slot being prepared do not count).
TEST(Slots, TheLatencyCriticalAsksOfAGpuAreSummedFromItsSlots) {
  testutil::TempDir state;
  const auto write = [&](const char* slot, PriorityClass priority, SharingMode mode,
                         const char* uuid, std::uint32_t cores) {
    Limits l;
    l.pod_uid = "uid";
    l.pod = "ml/p";
    l.container = "main";
    l.priority = priority;
    l.mode = mode;
    l.devices.push_back({uuid, 1 << 30, cores, 0, 0});
    const std::string path = PathsOf(state.path(), "", slot).limits;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << FormatLimitsFile(l);
  };
  write("slot-0001", PriorityClass::kLatencyCritical, SharingMode::kMps, "GPU-a", 30);
  write("slot-0002", PriorityClass::kLatencyCritical, SharingMode::kMps, "GPU-a", 15);
  write("slot-0003", PriorityClass::kBestEffort, SharingMode::kMps, "GPU-a", 40);
  write("slot-0004", PriorityClass::kLatencyCritical, SharingMode::kMps, "GPU-b", 50);
  write("slot-0005", PriorityClass::kLatencyCritical, SharingMode::kShared, "GPU-a", 20);
  EXPECT_EQ(LatencyCriticalMpsAsks(state.path(), "GPU-a", "slot-0003"), 45u);
  EXPECT_EQ(LatencyCriticalMpsAsks(state.path(), "GPU-a", "slot-0001"), 15u);
  EXPECT_EQ(LatencyCriticalMpsAsks(state.path(), "GPU-c", "slot-0003"), 0u);
  EXPECT_EQ(LatencyCriticalMpsAsks(state.path() + "/missing", "GPU-a", ""), 0u);
}

}  // namespace
}  // namespace tessera::agent
