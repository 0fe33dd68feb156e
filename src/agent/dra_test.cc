#include "agent/dra.h"

#include <filesystem>
#include <functional>
#include <sys/stat.h>

#include <gtest/gtest.h>

#include "tessera/file.h"
#include "tessera/names.h"

#include "agent/slots.h"
#include "testutil/status_matchers.h"
#include "testutil/temp_dir.h"

namespace tessera::agent::dra {
namespace {

using k8s::Json;

constexpr char kGpu0[] = "GPU-aaaa0000-0000-0000-0000-000000000000";
constexpr char kGpu1[] = "GPU-aaaa0000-0000-0000-0000-000000000001";
constexpr std::uint64_t kGiB = 1ULL << 30;
constexpr char kUid[] = "0f1e2d3c-0000-4000-8000-00000000abcd";

InventoryContent TwoGpus() {
  InventoryContent c;
  c.node = "n1";
  InventoryGpu a;
  a.facts.uuid = kGpu0;
  a.facts.index = 0;
  a.facts.model = "NVIDIA H200";
  a.facts.memory_bytes = 141 * kGiB;
  a.facts.numa_node = 1;
  a.managed = true;
  InventoryGpu b = a;
  b.facts.uuid = kGpu1;
  b.facts.index = 1;
  b.healthy = false;
  b.health_reason = "XID 79";
  InventoryGpu foreign = a;
  foreign.facts.uuid = "GPU-ffff";
  foreign.facts.index = 2;
  foreign.managed = false;
  c.gpus = {a, b, foreign};
  return c;
}

TEST(ResourceSliceFor, PublishesEachManagedGpuWithItsCapacitiesAndTaintsTheUnhealthy) {
  const Json slice = ResourceSliceFor(TwoGpus(), 7);
  EXPECT_EQ(slice["metadata"]["name"], "n1-gpu.tessera.dev");
  const Json& spec = slice["spec"];
  EXPECT_EQ(spec["driver"], names::kDraDriver);
  EXPECT_EQ(spec["nodeName"], "n1");
  EXPECT_EQ(spec["pool"], Json({{"name", "n1"}, {"generation", 7}, {"resourceSliceCount", 1}}));
  ASSERT_EQ(spec["devices"].size(), 2u);  // the unmanaged GPU is not offered
  const Json& d0 = spec["devices"][0];
  EXPECT_EQ(d0["name"], "gpu-0");
  EXPECT_EQ(d0["attributes"]["uuid"]["string"], kGpu0);
  EXPECT_EQ(d0["attributes"]["numaNode"]["int"], 1);
  EXPECT_EQ(d0["allowMultipleAllocations"], true);
  EXPECT_EQ(d0["capacity"]["memory"]["value"], "141Gi");
  EXPECT_EQ(d0["capacity"]["memory"]["requestPolicy"]["validRange"]["step"], "256Mi");
  EXPECT_EQ(d0["capacity"]["memory"]["requestPolicy"]["default"], "1Gi");
  EXPECT_EQ(d0["capacity"]["cores"]["value"], "100");
  EXPECT_TRUE(d0["taints"].empty());
  // max - min must be whole steps: 141Gi is, an H100's 81559Mi is not (rounded down).
  InventoryContent odd = TwoGpus();
  odd.gpus[0].facts.memory_bytes = 81559ULL << 20;
  odd.gpus[1].health_reason = "";
  const Json odd_slice = ResourceSliceFor(odd, 1);
  const Json& memory = odd_slice["spec"]["devices"][0]["capacity"]["memory"];
  EXPECT_EQ(memory["value"], "81559Mi");
  EXPECT_EQ(memory["requestPolicy"]["validRange"]["max"], "81408Mi");
  EXPECT_EQ(odd_slice["spec"]["devices"][1]["taints"][0]["value"], "unknown");  // never empty
  const Json& d1 = spec["devices"][1];
  ASSERT_EQ(d1["taints"].size(), 1u);
  EXPECT_EQ(d1["taints"][0]["key"], names::kDraTaintUnhealthy);
  EXPECT_EQ(d1["taints"][0]["value"], "XID-79");  // a label value
  EXPECT_EQ(d1["taints"][0]["effect"], "NoSchedule");
}

// A claim as kube-scheduler and the resource-claim controller leave it: allocated on n1's gpu-0
// with 4 GiB and 30 % consumed, reserved for pod "train".
Json Claim() {
  return {{"metadata", {{"name", "c1"}, {"namespace", "ml"}, {"uid", kUid}}},
          {"spec",
           {{"devices",
             {{"requests",
               {{{"name", "gpu"},
                 {"exactly",
                  {{"deviceClassName", names::kDraClassShared},
                   {"capacity", {{"requests", {{"memory", "4Gi"}, {"cores", "30"}}}}}}}}}}}}}},
          {"status",
           {{"allocation",
             {{"devices",
               {{"results",
                 {{{"request", "gpu"},
                   {"driver", names::kDraDriver},
                   {"pool", "n1"},
                   {"device", "gpu-0"},
                   {"shareID", "4f1b"},
                   {"consumedCapacity", {{"memory", "4Gi"}, {"cores", "30"}}}}}},
                {"config",
                 {{{"source", "FromClass"},
                   {"requests", {"gpu"}},
                   {"opaque",
                    {{"driver", names::kDraDriver},
                     {"parameters",
                      {{"apiVersion", names::kDraConfigApiVersion},
                       {"kind", names::kDraConfigKind},
                       {"priority", "latency-critical"},
                       {"compute", "work-conserving"}}}}}}}}}}}},
            {"reservedFor", {{{"resource", "pods"}, {"name", "train"}, {"uid", "pod-uid-1"}}}}}}};
}

class ClaimLimitsTest : public ::testing::Test {
 protected:
  ClaimLimitsTest() {
    policy_ = policy::DefaultPolicy();
    policy_.tiers[static_cast<std::size_t>(TrustTier::kRegulated)].modes = {
        SharingMode::kExclusive};
    context_.node = "n1";
    context_.policy = &policy_;
    context_.tier = TrustTier::kTeam;
    context_.devices["gpu-0"] = {kGpu0, 141 * kGiB,
                                 BinderGpu{0, true, true, "", 512ULL << 20, 4096}};
    context_.devices["gpu-1"] = {kGpu1, 141 * kGiB, BinderGpu{1, true, false, "XID 79", 0, 0}};
  }
  StatusOr<PreparedClaim> Judge(const Json& claim) { return ClaimLimits(claim, kUid, context_); }
  // The error of judging `claim`, which must fail.
  std::string ErrorOf(const Json& claim) {
    auto got = Judge(claim);
    EXPECT_FALSE(got.ok());
    return got.ok() ? "" : got.status().ToString();
  }
  policy::Policy policy_;
  ClaimContext context_;
};

TEST_F(ClaimLimitsTest, AnAllocatedClaimBecomesTheLimitsOfItsSlot) {
  auto got = Judge(Claim());
  ASSERT_OK(got);
  const Limits& l = got->limits;
  EXPECT_EQ(l.pod_uid, "pod-uid-1");
  EXPECT_EQ(l.pod, "ml/train");
  EXPECT_EQ(l.container, "claim/c1");
  EXPECT_EQ(l.mode, SharingMode::kShared);
  EXPECT_EQ(l.priority, PriorityClass::kLatencyCritical);
  EXPECT_EQ(l.compute, ComputeMode::kWorkConserving);
  EXPECT_FALSE(l.fail_closed);  // team: fail-open
  ASSERT_EQ(l.devices.size(), 1u);
  EXPECT_EQ(l.devices[0].uuid, kGpu0);
  EXPECT_EQ(l.devices[0].memory_bytes, 4 * kGiB);
  EXPECT_EQ(l.devices[0].cores_percent, 30u);
  EXPECT_EQ(l.devices[0].context_bytes, 512ULL << 20);
  ASSERT_EQ(got->devices.size(), 1u);
  EXPECT_EQ(got->devices[0].request, "gpu");
  EXPECT_EQ(got->devices[0].share_id, "4f1b");
}

TEST_F(ClaimLimitsTest, TwoRequestsOnOneGpuGetOneCapAndOneShare) {
  Json claim = Claim();
  Json second = claim["status"]["allocation"]["devices"]["results"][0];
  second["request"] = "more";
  second["consumedCapacity"] = {{"memory", "2Gi"}, {"cores", "10"}};
  claim["status"]["allocation"]["devices"]["results"].push_back(second);
  auto got = Judge(claim);
  ASSERT_OK(got);
  ASSERT_EQ(got->limits.devices.size(), 1u);
  EXPECT_EQ(got->limits.devices[0].memory_bytes, 6 * kGiB);
  EXPECT_EQ(got->limits.devices[0].cores_percent, 40u);
  EXPECT_EQ(got->devices.size(), 2u);
}

TEST_F(ClaimLimitsTest, WithoutConsumableCapacityADeviceIsTheWholeGpu) {
  Json claim = Claim();
  claim["status"]["allocation"]["devices"]["results"][0].erase("consumedCapacity");
  auto got = Judge(claim);
  ASSERT_OK(got);
  EXPECT_EQ(got->limits.devices[0].memory_bytes, 141 * kGiB);
  EXPECT_EQ(got->limits.devices[0].cores_percent, 100u);
}

TEST_F(ClaimLimitsTest, BadClaimsAreRefusedNamingTheField) {
  Json replaced = Claim();
  replaced["metadata"]["uid"] = "other";
  EXPECT_NE(ErrorOf(replaced).find("metadata.uid"), std::string::npos);

  Json unallocated = Claim();
  unallocated["status"].erase("allocation");
  EXPECT_NE(ErrorOf(unallocated).find("not allocated"), std::string::npos);

  Json elsewhere = Claim();
  elsewhere["status"]["allocation"]["devices"]["results"][0]["pool"] = "n2";
  EXPECT_NE(ErrorOf(elsewhere).find("results[0].pool"), std::string::npos);

  Json unknown = Claim();
  unknown["status"]["allocation"]["devices"]["results"][0]["device"] = "gpu-9";
  EXPECT_NE(ErrorOf(unknown).find("results[0].device"), std::string::npos);

  Json sick = Claim();
  sick["status"]["allocation"]["devices"]["results"][0]["device"] = "gpu-1";
  EXPECT_NE(ErrorOf(sick).find("unhealthy"), std::string::npos);

  Json huge = Claim();
  huge["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"]["memory"] = "200Gi";
  EXPECT_NE(ErrorOf(huge).find("consumedCapacity.memory"), std::string::npos);

  Json garbage = Claim();
  garbage["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"]["cores"] = "lots";
  EXPECT_NE(ErrorOf(garbage).find("consumedCapacity.cores"), std::string::npos);

  Json over = Claim();
  over["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"]["cores"] = "101";
  EXPECT_NE(ErrorOf(over).find("consumedCapacity.cores"), std::string::npos);

  Json nobody = Claim();
  nobody["status"].erase("reservedFor");
  EXPECT_NE(ErrorOf(nobody).find("status.reservedFor"), std::string::npos);

  Json other_driver = Claim();
  other_driver["status"]["allocation"]["devices"]["results"][0]["driver"] = "gpu.nvidia.com";
  EXPECT_NE(ErrorOf(other_driver).find("no device of gpu.tessera.dev"), std::string::npos);
}

TEST_F(ClaimLimitsTest, TheConfigIsCheckedFieldByField) {
  const auto with = [](const Json& parameters) {
    Json claim = Claim();
    claim["status"]["allocation"]["devices"]["config"][0]["opaque"]["parameters"] = parameters;
    return claim;
  };
  const Json base = {{"apiVersion", names::kDraConfigApiVersion}, {"kind", names::kDraConfigKind}};
  Json kind = base;
  kind["kind"] = "GpuSettings";
  EXPECT_NE(ErrorOf(with(kind)).find("config[0] (FromClass).opaque.parameters: apiVersion/kind"),
            std::string::npos);
  Json priority = base;
  priority["priority"] = "urgent";
  EXPECT_NE(ErrorOf(with(priority)).find("parameters.priority"), std::string::npos);
  Json window = base;
  window["windowMs"] = 5;
  EXPECT_NE(ErrorOf(with(window)).find("parameters.windowMs"), std::string::npos);
  Json extra = base;
  extra["gpuCores"] = 50;
  EXPECT_NE(ErrorOf(with(extra)).find("parameters.gpuCores: unknown field"), std::string::npos);
  EXPECT_NE(ErrorOf(with("text")).find("not an object"), std::string::npos);

  // A claim's own config (the tenant's) may lower the class's priority, never raise it.
  Json lower = Claim();
  Json tenant = lower["status"]["allocation"]["devices"]["config"][0];
  tenant["source"] = "FromClaim";
  tenant["opaque"]["parameters"] = {{"apiVersion", names::kDraConfigApiVersion},
                                    {"kind", names::kDraConfigKind},
                                    {"priority", "best-effort"}};
  lower["status"]["allocation"]["devices"]["config"].push_back(tenant);
  auto lowered = Judge(lower);
  ASSERT_OK(lowered);
  EXPECT_EQ(lowered->limits.priority, PriorityClass::kBestEffort);
  EXPECT_EQ(lowered->limits.compute, ComputeMode::kWorkConserving);  // the class's, kept
  Json raise = lower;
  raise["status"]["allocation"]["devices"]["config"][1]["opaque"]["parameters"]["priority"] =
      "latency-critical";
  EXPECT_NE(ErrorOf(raise).find("config[1] (FromClaim).opaque.parameters.priority"),
            std::string::npos);

  // A config for "gpu/big" is not for the allocated subrequest "gpu/small"; one for "gpu" is.
  Json sub = with(priority);
  sub["status"]["allocation"]["devices"]["results"][0]["request"] = "gpu/small";
  sub["spec"]["devices"]["requests"][0] = {
      {"name", "gpu"},
      {"firstAvailable",
       {{{"name", "big"}, {"deviceClassName", names::kDraClassShared}},
        {{"name", "small"}, {"deviceClassName", names::kDraClassShared}}}}};
  sub["status"]["allocation"]["devices"]["config"][0]["requests"] = {"gpu/big"};
  auto got_sub = Judge(sub);
  ASSERT_OK(got_sub);
  EXPECT_EQ(got_sub->devices[0].request, "gpu");  // what kubelet matches containers against
  sub["status"]["allocation"]["devices"]["config"][0]["requests"] = {"gpu"};
  EXPECT_NE(ErrorOf(sub).find("parameters.priority"), std::string::npos);

  // A config for another request of the claim is not ours to apply.
  Json elsewhere = with(priority);
  elsewhere["status"]["allocation"]["devices"]["config"][0]["requests"] = {"other"};
  EXPECT_OK(Judge(elsewhere));
}

// kube-scheduler packs claims knowing nothing of tiers: the node refuses what the tier may not
// share a GPU with, and a second mode on one GPU.
TEST_F(ClaimLimitsTest, ClaimsAlreadyOnTheGpuDecideWhoMayJoinIt) {
  context_.neighbours = {
      {kGpu0, "claim a of pod acme/x", "acme", TrustTier::kCustomer, "", SharingMode::kShared}};
  EXPECT_NE(ErrorOf(Claim()).find("may not share GPU " + std::string(kGpu0) + " with claim a"),
            std::string::npos);
  context_.neighbours[0].namespace_name = "ml";  // the customer's own namespace: allowed
  context_.tier = TrustTier::kCustomer;
  EXPECT_OK(Judge(Claim()));
  context_.tier = TrustTier::kTeam;
  context_.neighbours = {
      {kGpu0, "claim b of pod ml/y", "ml", TrustTier::kTeam, "", SharingMode::kMps}};
  EXPECT_NE(ErrorOf(Claim()).find("a GPU runs one mode"), std::string::npos);
  context_.neighbours[0].uuid = kGpu1;  // another GPU's neighbours are not this claim's
  EXPECT_OK(Judge(Claim()));
}

TEST_F(ClaimLimitsTest, TheTierDecidesTheModeAndMpsNeedsItsUser) {
  context_.tier = TrustTier::kRegulated;
  EXPECT_NE(ErrorOf(Claim()).find("does not allow mode shared"), std::string::npos);

  context_.tier = TrustTier::kTeam;
  Json mps = Claim();
  mps["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = names::kDraClassMps;
  EXPECT_NE(ErrorOf(mps).find("mpsUser"), std::string::npos);
  mps["status"]["allocation"]["devices"]["config"][0]["opaque"]["parameters"]["mpsUser"] = 1000;
  auto got = Judge(mps);
  ASSERT_OK(got);
  EXPECT_EQ(got->limits.mode, SharingMode::kMps);
  EXPECT_EQ(got->mps_user, "1000");
}

// ---- ClaimPreparer with the real SlotBinder on a temporary node

class TableClaims : public ClaimApi {
 public:
  std::map<std::string, Json> claims;  // "ns/name"
  bool unavailable = false;            // the API server cannot be reached
  StatusOr<Json> GetClaim(std::string_view ns, std::string_view name) override {
    if (unavailable) return UnavailableError("connection refused");
    auto it = claims.find(std::string(ns) + "/" + std::string(name));
    if (it == claims.end())
      return NotFoundError("resourceclaims \"" + std::string(name) + "\" not found");
    return it->second;
  }
  StatusOr<std::optional<std::string>> TrustLabel(std::string_view) override {
    return std::optional<std::string>();
  }
};

class NoOwners : public DeviceOwners {
 public:
  StatusOr<std::optional<DeviceOwner>> OwnerOf(std::string_view, std::string_view) override {
    return std::optional<DeviceOwner>();
  }
  StatusOr<std::set<std::string>> HeldDevices(std::string_view) override {
    return std::set<std::string>();
  }
};

class NoPods : public PodApi {
 public:
  StatusOr<Json> GetPod(std::string_view, std::string_view name) override {
    return NotFoundError(std::string(name));
  }
  void WarnPod(const Json&, std::string_view, std::string_view) override {}
};

class ClaimPreparerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BinderOptions o;
    o.node_name = "n1";
    o.state_dir = dir_.path() + "/state";
    o.cdi_dir = dir_.path() + "/cdi";
    o.hook_library = "/opt/tessera/libtessera-cuda.so";
    o.ld_so_preload = dir_.path() + "/state/ld.so.preload";
    o.driver.files = {"/usr/lib/libcuda.so.1"};
    o.policy = policy::DefaultPolicy();
    std::filesystem::create_directories(o.cdi_dir);
    binder_ = std::make_unique<SlotBinder>(o, &owners_, &pods_);
    std::map<std::string, BinderGpu, std::less<>> gpus = {
        {kGpu0, BinderGpu{3, true, true, "", 512ULL << 20, 4096}}};
    binder_->SetGpus(gpus);
    preparer_ =
        std::make_unique<ClaimPreparer>("n1", policy::DefaultPolicy(), &claims_, binder_.get());
    preparer_->SetInventory(TwoGpus(), gpus);
    claims_.claims["ml/c1"] = Claim();
    paths_ = PathsOf(dir_.path() + "/state", dir_.path() + "/cdi", ClaimSlot(kUid));
  }
  testutil::TempDir dir_;
  NoOwners owners_;
  NoPods pods_;
  TableClaims claims_;
  std::unique_ptr<SlotBinder> binder_;
  std::unique_ptr<ClaimPreparer> preparer_;
  SlotPaths paths_;
};

ino_t InodeOf(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

TEST_F(ClaimPreparerTest, PreparesTheClaimsSlotOnceAndReleasesIt) {
  auto prepared = preparer_->Prepare("ml", "c1", kUid);
  ASSERT_OK(prepared);
  EXPECT_EQ(prepared->cdi_device, std::string("tessera.dev/gpu=claim-") + kUid);
  EXPECT_EQ(prepared->pool, "n1");
  auto limits = ParseLimitsFile(ReadFile(paths_.limits, kMaxLimitsFileBytes).value_or(""));
  ASSERT_OK(limits);
  EXPECT_EQ(limits->devices.at(0).memory_bytes, 4 * kGiB);
  EXPECT_EQ(limits->priority, PriorityClass::kLatencyCritical);
  // No Allocate answer on this path: the CDI spec carries the slot's mounts and environment.
  const std::string spec = ReadFile(paths_.cdi_spec, 1 << 20).value_or("");
  EXPECT_NE(spec.find(paths_.etc_dir), std::string::npos) << spec;
  EXPECT_NE(spec.find(paths_.run_dir), std::string::npos) << spec;
  EXPECT_NE(spec.find("/opt/tessera/libtessera-cuda.so"), std::string::npos) << spec;
  EXPECT_NE(spec.find("/dev/nvidia3"), std::string::npos) << spec;

  // kubelet prepares again after its restart: the running containers' region stays.
  const ino_t region = InodeOf(paths_.region);
  ASSERT_NE(region, 0u);
  ASSERT_OK(preparer_->Prepare("ml", "c1", kUid));
  EXPECT_EQ(InodeOf(paths_.region), region);

  // The claim now reserved for another pod (the first ended; a claim may be shared): the limits
  // file names it, and the region with the claim's devices and caps stays.
  Json shared = Claim();
  shared["status"]["reservedFor"] = {
      {{"resource", "pods"}, {"name", "eval"}, {"uid", "pod-uid-2"}}};
  claims_.claims["ml/c1"] = shared;
  ASSERT_OK(preparer_->Prepare("ml", "c1", kUid));
  EXPECT_NE(ReadFile(paths_.limits, kMaxLimitsFileBytes).value_or("").find("ml/eval"),
            std::string::npos);
  EXPECT_EQ(InodeOf(paths_.region), region);

  ASSERT_OK(preparer_->Unprepare(kUid));
  EXPECT_FALSE(std::filesystem::exists(paths_.dir));
  EXPECT_FALSE(std::filesystem::exists(paths_.cdi_spec));
  EXPECT_OK(preparer_->Unprepare(kUid));  // again: nothing left, no error
}

// A claim slot kubelet will never release (it lost its checkpoint): the claim deleted, made
// again under another UID, deallocated, or reserved for no pod. Released on the second pass in a
// row that finds it so; kept while the claim still needs it, when it came back between passes,
// and when the claim cannot be read.
TEST_F(ClaimPreparerTest, ASlotWhoseClaimLeftTheNodeIsReleasedOnTheSecondPass) {
  const auto prepared_then = [&](const std::function<void(Json&)>& change) {
    claims_.claims["ml/c1"] = Claim();
    EXPECT_OK(preparer_->Prepare("ml", "c1", kUid));
    Json claim = Claim();
    change(claim);
    if (claim.is_null()) {
      claims_.claims.erase("ml/c1");
    } else {
      claims_.claims["ml/c1"] = claim;
    }
  };
  const std::vector<std::pair<const char*, std::function<void(Json&)>>> gone = {
      {"deleted", [](Json& c) { c = Json(); }},
      {"made again",
       [](Json& c) { c["metadata"]["uid"] = "0000aaaa-0000-4000-8000-00000000000f"; }},
      {"deallocated", [](Json& c) { c["status"].erase("allocation"); }},
      {"on another node",
       [](Json& c) { c["status"]["allocation"]["devices"]["results"][0]["pool"] = "n2"; }},
      {"reserved for no pod", [](Json& c) { c["status"]["reservedFor"] = Json::array(); }},
  };
  for (const auto& [what, change] : gone) {
    prepared_then(change);
    auto first = preparer_->ReleaseOrphans();
    ASSERT_OK(first);
    EXPECT_EQ(*first, 0) << what;
    EXPECT_TRUE(std::filesystem::exists(paths_.limits)) << what;
    auto second = preparer_->ReleaseOrphans();
    ASSERT_OK(second);
    EXPECT_EQ(*second, 1) << what;
    EXPECT_FALSE(std::filesystem::exists(paths_.dir)) << what;
    EXPECT_FALSE(std::filesystem::exists(paths_.cdi_spec)) << what;
  }

  // Still allocated here and reserved: kept, pass after pass.
  prepared_then([](Json&) {});
  for (int pass = 0; pass < 3; ++pass) EXPECT_EQ(preparer_->ReleaseOrphans().value_or(-1), 0);
  EXPECT_TRUE(std::filesystem::exists(paths_.limits));

  // Gone in one pass, back in the next: kept (two passes in a row decide).
  claims_.claims.erase("ml/c1");
  EXPECT_EQ(preparer_->ReleaseOrphans().value_or(-1), 0);
  claims_.claims["ml/c1"] = Claim();
  EXPECT_EQ(preparer_->ReleaseOrphans().value_or(-1), 0);
  claims_.claims.erase("ml/c1");
  EXPECT_EQ(preparer_->ReleaseOrphans().value_or(-1), 0);
  EXPECT_TRUE(std::filesystem::exists(paths_.limits));

  // The API cannot say: kept however long it cannot.
  claims_.unavailable = true;
  for (int pass = 0; pass < 3; ++pass) EXPECT_EQ(preparer_->ReleaseOrphans().value_or(-1), 0);
  EXPECT_TRUE(std::filesystem::exists(paths_.limits));
  claims_.unavailable = false;
  EXPECT_EQ(preparer_->ReleaseOrphans().value_or(-1), 0);  // gone: the first pass of two
  EXPECT_EQ(preparer_->ReleaseOrphans().value_or(-1), 1);
}

TEST_F(ClaimPreparerTest, AClaimOfACustomerBesideAnotherNamespaceIsRefused) {
  constexpr char kOther[] = "0000aaaa-0000-4000-8000-000000000009";
  policy::Policy policy = policy::DefaultPolicy();
  policy.namespaces["acme"] = TrustTier::kCustomer;
  preparer_ = std::make_unique<ClaimPreparer>("n1", policy, &claims_, binder_.get());
  std::map<std::string, BinderGpu, std::less<>> gpus = {
      {kGpu0, BinderGpu{3, true, true, "", 512ULL << 20, 4096}}};
  preparer_->SetInventory(TwoGpus(), gpus);
  ASSERT_OK(preparer_->Prepare("ml", "c1", kUid));  // ml's claim on gpu-0 first
  Json other = Claim();
  other["metadata"] = {{"name", "c9"}, {"namespace", "acme"}, {"uid", kOther}};
  claims_.claims["acme/c9"] = other;
  auto refused = preparer_->Prepare("acme", "c9", kOther);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("tier customer may not share GPU"), std::string::npos)
      << refused.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(
      PathsOf(dir_.path() + "/state", dir_.path() + "/cdi", ClaimSlot(kOther)).limits));
  // The other way round: the customer first, then a team's claim beside it is refused too (the
  // neighbour's namespace and tier come from its slot's limits file); the customer's own
  // namespace may join it.
  ASSERT_OK(preparer_->Unprepare(kUid));
  ASSERT_OK(preparer_->Prepare("acme", "c9", kOther));
  EXPECT_FALSE(preparer_->Prepare("ml", "c1", kUid).ok());
  constexpr char kThird[] = "0000aaaa-0000-4000-8000-00000000000a";
  Json same = Claim();
  same["metadata"] = {{"name", "c10"}, {"namespace", "acme"}, {"uid", kThird}};
  claims_.claims["acme/c10"] = same;
  EXPECT_OK(preparer_->Prepare("acme", "c10", kThird));
  // A claim never meets itself: prepared again (after kubelet's restart) under a policy whose
  // customers share with nobody, not even their own namespace.
  policy.tiers[static_cast<std::size_t>(TrustTier::kCustomer)].co_tenancy =
      policy::CoTenancy::kNone;
  ASSERT_OK(preparer_->Unprepare(kThird));
  ClaimPreparer strict("n1", policy, &claims_, binder_.get());
  strict.SetInventory(TwoGpus(), gpus);
  EXPECT_OK(strict.Prepare("acme", "c9", kOther));

  // Before the first inventory nothing is judged: kubelet is asked to come back.
  ClaimPreparer early("n1", policy, &claims_, binder_.get());
  auto not_yet = early.Prepare("ml", "c1", kUid);
  ASSERT_FALSE(not_yet.ok());
  EXPECT_EQ(not_yet.status().code(), StatusCode::kUnavailable);
}

TEST_F(ClaimPreparerTest, ARefusedClaimLeavesNothingBehind) {
  Json bad = Claim();
  bad["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"]["cores"] = "500";
  claims_.claims["ml/c1"] = bad;
  EXPECT_FALSE(preparer_->Prepare("ml", "c1", kUid).ok());
  EXPECT_FALSE(std::filesystem::exists(paths_.limits));
  EXPECT_FALSE(std::filesystem::exists(paths_.cdi_spec));

  // Mode mps on a node without MPS daemons: refused by the binder, nothing half-written.
  Json mps = Claim();
  mps["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = names::kDraClassMps;
  mps["status"]["allocation"]["devices"]["config"][0]["opaque"]["parameters"]["mpsUser"] = 1000;
  claims_.claims["ml/c1"] = mps;
  auto refused = preparer_->Prepare("ml", "c1", kUid);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("MPS"), std::string::npos)
      << refused.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(paths_.limits));
  EXPECT_FALSE(std::filesystem::exists(paths_.cdi_spec));

  EXPECT_FALSE(preparer_->Prepare("ml", "missing", kUid).ok());
  EXPECT_FALSE(preparer_->Prepare("ml", "c1", "../../etc").ok());  // not a UID
}

}  // namespace
}  // namespace tessera::agent::dra
