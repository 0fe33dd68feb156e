// What this release builds, once: `tessera advise` says what tessera does and does not do from
// this list and nothing else, and src/cli/features_test.cc checks every entry against the code
// (a built one must be reachable, an unbuilt one must still be refused or absent), so the advice
// cannot drift from the product again (issue #23: advise once said compute shares were "not yet
// in this release" after they had shipped).
#pragma once

#include <span>
#include <string_view>

namespace tessera::advise {

// X(id, built, "what advise says")
#define TESSERA_FEATURES(X)                                                                     \
  X(kMemoryCaps, true, "GPU memory caps on every allocation path (the preload library)")        \
  X(kComputeShares, true,                                                                       \
    "compute shares and priority classes (measured GPU busy time, one arbiter per GPU)")        \
  X(kMpsSpatialPriority, true,                                                                  \
    "MPS daemons for mode mps, with SM limits that leave latency-critical clients a reserve")   \
  X(kDrift, true, "drift checks of NVML against every container, with kill or evict per tier")  \
  X(kPlacement, true,                                                                           \
    "fragmentation-aware placement through the kube-scheduler extender, with signed decisions") \
  X(kMigPlacement, false, "placing pods on MIG instances (admission refuses mode mig)")         \
  X(kDraDriver, false, "a Kubernetes DRA driver (resource.k8s.io)")                             \
  X(kCopyEngineTime, false,                                                                     \
    "copy-engine time per container (copies are neither measured nor charged)")

enum class FeatureId {
#define TESSERA_FEATURE_ENUM(id, built, text) id,
  TESSERA_FEATURES(TESSERA_FEATURE_ENUM)
#undef TESSERA_FEATURE_ENUM
};

struct Feature {
  FeatureId id;
  std::string_view name;  // "kMemoryCaps"
  bool built;
  std::string_view text;
};

inline constexpr Feature kFeatures[] = {
#define TESSERA_FEATURE_INFO(id, built, text) {FeatureId::id, #id, built, text},
    TESSERA_FEATURES(TESSERA_FEATURE_INFO)
#undef TESSERA_FEATURE_INFO
};

inline constexpr bool Built(FeatureId id) {
  for (const Feature& f : kFeatures) {
    if (f.id == id) return f.built;
  }
  return false;
}

}  // namespace tessera::advise
