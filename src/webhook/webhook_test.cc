#include "webhook/webhook.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>

#include "contract/contract_testing.h"
#include "testutil/fake_clock.h"
#include "testutil/status_matchers.h"

namespace tessera::webhook {
namespace {

using contract::testing::MakePod;
using contract::testing::PodSpec;
using nlohmann::json;

constexpr std::uint64_t kGiB = 1ULL << 30;

json Review(const std::string& operation, const json& object, const json& old_object = nullptr,
            const std::string& user = "alice", const std::string& sub_resource = "") {
  json req = {
      {"uid", "req-1"},
      {"kind",
       {{"group", ""}, {"version", "v1"}, {"kind", sub_resource.empty() ? "Pod" : "Binding"}}},
      {"resource", {{"group", ""}, {"version", "v1"}, {"resource", "pods"}}},
      {"operation", operation},
      {"namespace", "ml"},
      {"name", "train-0"},
      {"userInfo", {{"username", user}, {"groups", {"system:authenticated"}}}},
      {"object", object},
      {"oldObject", old_object}};
  if (!sub_resource.empty()) req["subResource"] = sub_resource;
  return {{"apiVersion", "admission.k8s.io/v1"}, {"kind", "AdmissionReview"}, {"request", req}};
}

json Pod(std::map<std::string, std::string> limits,
         std::map<std::string, std::string> annotations = {}) {
  PodSpec s;
  s.ns = "ml";
  s.name = "train-0";
  s.uid = "";
  s.limits = std::move(limits);
  s.annotations = std::move(annotations);
  json pod = MakePod(s);
  pod["metadata"].erase("uid");
  return pod;
}

std::string Decode(const std::string& b64) {
  std::string out(b64.size(), '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(b64.data()),
                                static_cast<int>(b64.size()));
  out.resize(static_cast<std::size_t>(n));
  while (!out.empty() && out.back() == '\0') out.pop_back();
  return out;
}

class WebhookTest : public ::testing::Test {
 protected:
  WebhookTest()
      : policy_(MakePolicy()),
        quotas_(&policy_, clock_),
        admission_(&policy_, Options(), View(), &quotas_) {}
  static policy::Policy MakePolicy() {
    auto p = policy::ParsePolicy(
        "version: v1\n"
        "tierAssignment:\n  defaultTier: team\n  namespaces:\n    bank: customer\n    vault: "
        "regulated\n"
        "quotas:\n  ml:\n    gpuMemory: 16Gi\n    gpuCores: 100\n    gpus: 2\n");
    return *p;
  }
  static WebhookOptions Options() {
    WebhookOptions o;
    o.scheduler_users = {"system:serviceaccount:tessera-system:tessera-scheduler"};
    o.count_claims = true;
    return o;
  }
  ClusterView View() {
    ClusterView v;
    v.largest_gpu_memory = [] { return 141 * kGiB; };
    v.priority_class_value = [](const std::string& name) -> std::optional<std::int32_t> {
      if (name == "tessera-latency-critical") return 1000000;
      if (name == "tessera-normal") return 1000;
      return std::nullopt;
    };
    return v;
  }
  // The patch Mutate answers, applied to `pod`.
  json Mutated(const json& pod) {
    json res = admission_.Mutate(Review("CREATE", pod))["response"];
    EXPECT_TRUE(res["allowed"].get<bool>());
    if (!res.contains("patch")) return pod;
    EXPECT_EQ(res["patchType"], "JSONPatch");
    return pod.patch(json::parse(Decode(res["patch"])));
  }
  json Validated(const json& review) { return admission_.Validate(review)["response"]; }
  std::string Denial(const json& review) {
    json res = Validated(review);
    EXPECT_FALSE(res["allowed"].get<bool>()) << res.dump();
    return res.value("/status/message"_json_pointer, std::string());
  }

  testutil::FakeClock clock_;
  policy::Policy policy_;
  QuotaBook quotas_;
  Admission admission_;
};

TEST_F(WebhookTest, SeedKaiManifestIsTranslated) {
  json pod = Pod({}, {{"gpu-memory", "2000"}});
  pod["spec"]["schedulerName"] = "kai-scheduler";
  json m = Mutated(pod);
  EXPECT_EQ(m["spec"]["schedulerName"], "default-scheduler");
  const json& c = m["spec"]["containers"][0]["resources"];
  EXPECT_EQ(c["limits"]["tessera.dev/gpu-memory"], "2000Mi");
  EXPECT_EQ(c["requests"]["tessera.dev/gpu-memory"], "2000Mi");
  EXPECT_EQ(c["limits"]["tessera.dev/gpu-slot"], "1");
  EXPECT_FALSE(m["metadata"]["annotations"].contains("gpu-memory"));
  EXPECT_EQ(m["spec"]["priorityClassName"], "tessera-normal");
  EXPECT_EQ(m["spec"]["priority"], 1000);
  // The translated pod is what validation then sees: admitted.
  EXPECT_TRUE(Validated(Review("CREATE", m))["allowed"].get<bool>());
}

TEST_F(WebhookTest, FractionKeepsItsAnnotationAndGetsASlot) {
  json m =
      Mutated(Pod({}, {{"gpu-fraction", "0.5"}, {"tessera.dev/priority", "latency-critical"}}));
  EXPECT_EQ(m["metadata"]["annotations"]["gpu-fraction"], "0.5");
  EXPECT_EQ(m["spec"]["containers"][0]["resources"]["limits"]["tessera.dev/gpu-slot"], "1");
  EXPECT_EQ(m["spec"]["priorityClassName"], "tessera-latency-critical");
  EXPECT_EQ(m["spec"]["priority"], 1000000);
}

TEST_F(WebhookTest, NothingToChangeMeansNoPatch) {
  json res = admission_.Mutate(Review("CREATE", Pod({{"cpu", "1"}})))["response"];
  EXPECT_TRUE(res["allowed"].get<bool>());
  EXPECT_FALSE(res.contains("patch"));
}

// A whole-GPU container gets the slot handle too: the device plugin hands it its GPUs' device
// nodes (CDI) and its limits file, as it does for a fraction.
TEST_F(WebhookTest, AWholeGpuAskGetsASlot) {
  json whole = Mutated(Pod({{"tessera.dev/gpu", "2"}}));
  EXPECT_EQ(whole["spec"]["containers"][0]["resources"]["limits"]["tessera.dev/gpu-slot"], "1");
  EXPECT_EQ(whole["spec"]["containers"][0]["resources"]["requests"]["tessera.dev/gpu-slot"], "1");
  // Validation reads the handle as nothing more: the same answer with it as without it (here
  // the namespace's memory quota, which two whole GPUs exceed).
  const json with = Validated(Review("CREATE", whole));
  const json without = Validated(Review("CREATE", Pod({{"tessera.dev/gpu", "2"}})));
  EXPECT_EQ(with["allowed"], without["allowed"]);
  EXPECT_EQ(with["status"].dump(), without["status"].dump());
}

TEST_F(WebhookTest, BadInputIsDeniedWithTheFieldAndTheAcceptedForm) {
  struct Case {
    std::map<std::string, std::string> limits;
    std::map<std::string, std::string> annotations;
    const char* message;
  };
  const Case cases[] = {
      {{{"tessera.dev/gpu-memory", "abc"}}, {}, "gpu-memory]"},
      {{{"tessera.dev/gpu-memory", "-1Gi"}}, {}, "gpu-memory]"},
      {{{"tessera.dev/gpu-memory", "200Gi"}},
       {},
       "more than any GPU in the cluster has (largest: 141.00 GiB)"},
      {{{"tessera.dev/gpu-cores", "0"}}, {}, "whole percent, 1-100"},
      {{{"tessera.dev/gpu-cores", "101"}}, {}, "whole percent, 1-100"},
      {{}, {{"gpu-fraction", "0.5"}, {"gpu-memory", "100"}}, "same thing twice"},
      {{{"tessera.dev/gpu-memory", "1Gi"}}, {{"tessera.dev/mode", "exclusive"}}, "shared or mps"},
      {{{"tessera.dev/gpu-memory", "1Gi"}}, {{"tessera.dev/mode", "mps"}}, "mps-user"},
  };
  for (const Case& c : cases) {
    const std::string why = Denial(Review("CREATE", Pod(c.limits, c.annotations)));
    EXPECT_NE(why.find(c.message), std::string::npos) << why;
  }
}

TEST_F(WebhookTest, TrustTiersComeFromThePolicy) {
  json pod = Pod({{"tessera.dev/gpu-memory", "1Gi"}}, {{"tessera.dev/trust", "team"}});
  json review = Review("CREATE", pod);
  review["request"]["namespace"] = "vault";
  pod["metadata"]["namespace"] = "vault";
  review["request"]["object"] = pod;
  EXPECT_NE(Denial(review).find("tier regulated allows no shared-GPU mode"), std::string::npos);
}

// A claim (or a claim template) of the DRA path, as the API server sends it for review.
json ClaimReview(const std::string& resource, const std::string& ns, const json& claim_spec) {
  const bool is_template = resource == "resourceclaimtemplates";
  json object = {{"apiVersion", "resource.k8s.io/v1"},
                 {"kind", is_template ? "ResourceClaimTemplate" : "ResourceClaim"},
                 {"metadata", {{"name", "c"}, {"namespace", ns}}},
                 {"spec", is_template ? json{{"spec", claim_spec}} : claim_spec}};
  json review = Review("CREATE", object);
  review["request"]["kind"] = {
      {"group", "resource.k8s.io"}, {"version", "v1"}, {"kind", object["kind"]}};
  review["request"]["resource"] = {
      {"group", "resource.k8s.io"}, {"version", "v1"}, {"resource", resource}};
  review["request"]["namespace"] = ns;
  review["request"]["name"] = "c";
  return review;
}

json ClaimSpec(const std::string& device_class, json capacity) {
  return {{"devices",
           {{"requests",
             {{{"name", "gpu"},
               {"exactly",
                {{"deviceClassName", device_class},
                 {"capacity", {{"requests", std::move(capacity)}}}}}}}}}}};
}

// On the DRA path kube-scheduler rounds a claim's ask to the request policy or leaves its pod
// Pending without a word: the webhook refuses nonsense first, claims and templates alike, naming
// the field and the accepted form, and counts each denial under its rule.
TEST_F(WebhookTest, ClaimsAndTemplatesAreCheckedAtCreation) {
  for (const std::string resource : {"resourceclaims", "resourceclaimtemplates"}) {
    const std::string spec = resource == "resourceclaims" ? ": spec." : ": spec.spec.";
    const std::string kind =
        resource == "resourceclaims" ? "ResourceClaim ml/c" : "ResourceClaimTemplate ml/c";
    EXPECT_TRUE(Validated(ClaimReview(
        resource, "ml",
        ClaimSpec("shared.gpu.tessera.dev", {{"memory", "12Gi"}, {"cores", "30"}})))["allowed"]
                    .get<bool>());
    std::string m =
        Denial(ClaimReview(resource, "ml", ClaimSpec("shared.gpu.tessera.dev", {{"memory", "0"}})));
    EXPECT_EQ(m.rfind(kind + spec +
                          "devices.requests[0].exactly.capacity.requests.memory: 0 asks "
                          "no memory; accepted: a quantity from 256Mi",
                      0),
              0u)
        << m;
    m = Denial(
        ClaimReview(resource, "ml", ClaimSpec("shared.gpu.tessera.dev", {{"memory", "200Gi"}})));
    EXPECT_NE(m.find("is more than any GPU in the cluster has (largest: 141.00 GiB"),
              std::string::npos)
        << m;
    // The namespace's tier, from the policy: regulated gets no shared class.
    json review =
        ClaimReview(resource, "vault", ClaimSpec("shared.gpu.tessera.dev", json::object()));
    EXPECT_EQ(Validated(review)["status"]["code"], 403) << m;
  }
  EXPECT_EQ(admission_.denials(DenialRule::kTooLarge), 2u);
  EXPECT_EQ(admission_.denials(DenialRule::kAsk), 4u);
  // Other drivers' claims pass; so do updates (the spec cannot change) and deletes.
  EXPECT_TRUE(Validated(ClaimReview("resourceclaims", "vault",
                                    ClaimSpec("gpu.nvidia.com", {{"memory", "0"}})))["allowed"]
                  .get<bool>());
  // The scheduler's Event goes to the claim (or template), not to a pod of the same name.
  std::vector<webhook::Denial> seen;
  WebhookOptions options = Options();
  options.on_denial = [&seen](const webhook::Denial& d) { seen.push_back(d); };
  Admission admission(&policy_, options, View(), nullptr);
  admission.Validate(ClaimReview("resourceclaimtemplates", "ml",
                                 ClaimSpec("shared.gpu.tessera.dev", {{"memory", "0"}})));
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].kind, "ResourceClaimTemplate");
  EXPECT_EQ(seen[0].api_version, "resource.k8s.io/v1");
  EXPECT_EQ(seen[0].name, "c");
  json update =
      ClaimReview("resourceclaims", "ml", ClaimSpec("shared.gpu.tessera.dev", {{"memory", "0"}}));
  update["request"]["operation"] = "UPDATE";
  EXPECT_TRUE(Validated(update)["allowed"].get<bool>());
}

TEST_F(WebhookTest, DecisionsCannotBeForged) {
  json forged = Pod({{"tessera.dev/gpu-memory", "1Gi"}},
                    {{"tessera.dev/decision", "{}"}, {"tessera.dev/decision-signature", "AAAA"}});
  EXPECT_NE(Denial(Review("CREATE", forged)).find("only the tessera scheduler writes decisions"),
            std::string::npos);
  json placed = Pod({{"tessera.dev/gpu-memory", "1Gi"}});
  placed["spec"]["nodeName"] = "gpu-node-1";
  EXPECT_NE(Denial(Review("CREATE", placed)).find("spec.nodeName"), std::string::npos);
  // Changing, adding or removing a decision on UPDATE, by anyone but the scheduler.
  json before = Pod({{"tessera.dev/gpu-memory", "1Gi"}}, {{"tessera.dev/decision", "{\"a\":1}"}});
  json after = before;
  after["metadata"]["annotations"]["tessera.dev/decision"] = "{\"a\":2}";
  EXPECT_NE(Denial(Review("UPDATE", after, before)).find("only the tessera scheduler may set"),
            std::string::npos);
  json removed = before;
  removed["metadata"]["annotations"].erase("tessera.dev/decision");
  EXPECT_FALSE(Validated(Review("UPDATE", removed, before))["allowed"].get<bool>());
  json other = before;
  other["metadata"]["annotations"]["team"] = "ml";  // other annotations are fine
  EXPECT_TRUE(Validated(Review("UPDATE", other, before))["allowed"].get<bool>());
  // The scheduler itself may, and so may its Binding.
  EXPECT_TRUE(Validated(Review("UPDATE", after, before,
                               "system:serviceaccount:tessera-system:tessera-scheduler"))["allowed"]
                  .get<bool>());
  json binding = {
      {"apiVersion", "v1"},
      {"kind", "Binding"},
      {"metadata", {{"name", "train-0"}, {"annotations", {{"tessera.dev/decision", "{}"}}}}},
      {"target", {{"kind", "Node"}, {"name", "n"}}}};
  EXPECT_NE(Denial(Review("CREATE", binding, nullptr, "mallory", "binding")).find("binding"),
            std::string::npos);
  EXPECT_TRUE(Validated(Review("CREATE", binding, nullptr,
                               "system:serviceaccount:tessera-system:tessera-scheduler",
                               "binding"))["allowed"]
                  .get<bool>());
}

TEST_F(WebhookTest, PriorityMustMatchThePolicysClass) {
  json pod =
      Pod({{"tessera.dev/gpu-memory", "1Gi"}}, {{"tessera.dev/priority", "latency-critical"}});
  pod["spec"]["priorityClassName"] = "batch";
  EXPECT_NE(Denial(Review("CREATE", pod)).find("maps to PriorityClass tessera-latency-critical"),
            std::string::npos);
  json missing =
      Pod({{"tessera.dev/gpu-memory", "1Gi"}}, {{"tessera.dev/priority", "best-effort"}});
  EXPECT_NE(Denial(Review("CREATE", missing)).find("does not exist in the cluster"),
            std::string::npos);
}

TEST_F(WebhookTest, QuotasCountLivePodsAndFreshAdmissions) {
  json a = Pod({{"tessera.dev/gpu-memory", "10Gi"}});
  EXPECT_TRUE(Validated(Review("CREATE", a))["allowed"].get<bool>());
  // Admitted but not yet seen by the watch: still counted.
  json b = Pod({{"tessera.dev/gpu-memory", "8Gi"}});
  json rb = Review("CREATE", b);
  rb["request"]["name"] = "train-1";
  const std::string why = Denial(rb);
  EXPECT_NE(why.find("quotas.ml.gpuMemory 16Gi exceeded: in use 10.00 GiB + asked 8.00 GiB"),
            std::string::npos)
      << why;
  // Once the first pod is gone, there is room.
  json seen = a;
  seen["metadata"]["uid"] = "u-a";
  quotas_.ObservePod(seen);
  quotas_.ForgetPod(seen);
  EXPECT_TRUE(Validated(rb)["allowed"].get<bool>());
  // Whole GPUs and compute shares have their own limits.
  json whole = Pod({{"tessera.dev/gpu", "3"}});
  json rw = Review("CREATE", whole);
  rw["request"]["name"] = "big";
  EXPECT_NE(Denial(rw).find("quotas.ml.gpus 2 exceeded"), std::string::npos);
}

// On the DRA path a claim takes its GPUs from its creation: claims count against the namespace's
// quota as pods do (admitted and not yet watched, or watched until deleted); a template takes
// nothing until a pod's claim is made from it (which comes to the webhook as a claim).
TEST_F(WebhookTest, QuotasCountClaimsOfTesseraClasses) {
  json first = ClaimReview("resourceclaims", "ml",
                           ClaimSpec("shared.gpu.tessera.dev", {{"memory", "10Gi"}}));
  EXPECT_TRUE(Validated(first)["allowed"].get<bool>());
  json second =
      ClaimReview("resourceclaims", "ml", ClaimSpec("shared.gpu.tessera.dev", {{"memory", "8Gi"}}));
  second["request"]["name"] = "c2";
  second["request"]["object"]["metadata"]["name"] = "c2";
  const std::string why = Denial(second);
  EXPECT_EQ(why.rfind("ResourceClaim ml/c2: namespace ml: quota quotas.ml.gpuMemory 16Gi "
                      "exceeded: in use 10.00 GiB + asked 8.00 GiB",
                      0),
            0u)
      << why;
  EXPECT_EQ(admission_.denials(DenialRule::kQuota), 1u);
  // A template of the same ask is admitted: it takes nothing itself.
  EXPECT_TRUE(
      Validated(ClaimReview("resourceclaimtemplates", "ml",
                            ClaimSpec("shared.gpu.tessera.dev", {{"memory", "8Gi"}})))["allowed"]
          .get<bool>());
  // The watch shows the first claim, then its deletion: room again.
  json claim = first["request"]["object"];
  claim["metadata"]["uid"] = "claim-1";
  quotas_.ObserveClaim(claim);
  EXPECT_EQ(quotas_.Used("ml", 141 * kGiB).memory_bytes, 10 * kGiB);
  quotas_.ForgetClaim(claim);
  EXPECT_EQ(quotas_.Used("ml", 141 * kGiB).memory_bytes, 0u);
  EXPECT_TRUE(Validated(second)["allowed"].get<bool>());
  // Claims and pods add up; another driver's claim counts nothing.
  json other = second["request"]["object"];
  other["metadata"]["uid"] = "claim-2";
  quotas_.ObserveClaim(other);
  json nvidia = ClaimReview("resourceclaims", "ml",
                            ClaimSpec("gpu.nvidia.com", {{"memory", "80Gi"}}))["request"]["object"];
  nvidia["metadata"]["uid"] = "claim-3";
  quotas_.ObserveClaim(nvidia);
  EXPECT_EQ(quotas_.Used("ml", 141 * kGiB).memory_bytes, 8 * kGiB);
  json pod = Pod({{"tessera.dev/gpu-memory", "10Gi"}});
  EXPECT_NE(Denial(Review("CREATE", pod)).find("in use 8.00 GiB + asked 10.00 GiB"),
            std::string::npos);
  // ReplaceClaims (a relist) keeps only what it lists.
  quotas_.ReplaceClaims({});
  EXPECT_EQ(quotas_.Used("ml", 141 * kGiB).memory_bytes, 0u);
  // Without the claims' watch (--count-claims) claims are not counted at all.
  WebhookOptions uncounted = Options();
  uncounted.count_claims = false;
  QuotaBook book(&policy_, clock_);
  Admission admission(&policy_, uncounted, View(), &book);
  EXPECT_TRUE(admission.Validate(first)["response"]["allowed"].get<bool>());
  EXPECT_EQ(book.Used("ml", 141 * kGiB).memory_bytes, 0u);
}

TEST_F(WebhookTest, AdmissionsExpireIfThePodNeverAppears) {
  json a = Pod({{"tessera.dev/gpu-memory", "10Gi"}});
  EXPECT_TRUE(Validated(Review("CREATE", a))["allowed"].get<bool>());
  EXPECT_EQ(quotas_.Used("ml", 141 * kGiB).memory_bytes, 10 * kGiB);
  clock_.Advance(std::chrono::seconds(31));
  EXPECT_EQ(quotas_.Used("ml", 141 * kGiB).memory_bytes, 0U);
}

TEST_F(WebhookTest, MalformedReviewsAreDeniedNotCrashed) {
  for (const char* text : {"null", "{}", "{\"apiVersion\":\"admission.k8s.io/v1\"}",
                           "{\"apiVersion\":\"admission.k8s.io/v1\",\"request\":{\"uid\":\"x\"}}",
                           "{\"apiVersion\":\"admission.k8s.io/v1\",\"request\":{\"uid\":\"x\","
                           "\"operation\":\"CREATE\",\"resource\":{\"resource\":\"pods\"},"
                           "\"object\":[1,2]}}"}) {
    json v = admission_.Validate(json::parse(text));
    json m = admission_.Mutate(json::parse(text));
    EXPECT_TRUE(v["response"].contains("allowed")) << text;
    EXPECT_TRUE(m["response"].contains("allowed")) << text;
  }
}

TEST_F(WebhookTest, TheAsksAnnotationsAreFrozenAfterCreation) {
  json before = Pod({}, {{"gpu-fraction", "0.05"}, {"tessera.dev/priority", "normal"}});
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"gpu-fraction", "1"},
           {"tessera.dev/priority", "latency-critical"},
           {"tessera.dev/mode", "mps"}}) {
    json after = before;
    after["metadata"]["annotations"][key] = value;
    EXPECT_NE(Denial(Review("UPDATE", after, before)).find("fixed when the pod is created"),
              std::string::npos)
        << key;
    // Not even the scheduler changes them.
    EXPECT_FALSE(
        Validated(Review("UPDATE", after, before,
                         "system:serviceaccount:tessera-system:tessera-scheduler"))["allowed"]
            .get<bool>());
  }
}

TEST_F(WebhookTest, WholeGpusCountAgainstMemoryAndComputeQuotasToo) {
  json whole = Pod({{"tessera.dev/gpu", "1"}});
  const std::string why = Denial(Review("CREATE", whole));  // 141 GiB > the 16 GiB quota
  EXPECT_NE(why.find("quotas.ml.gpuMemory"), std::string::npos) << why;
}

}  // namespace
}  // namespace tessera::webhook
