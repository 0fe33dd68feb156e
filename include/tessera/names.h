// Every name tessera puts on the wire or on disk, defined once. docs/protocol.md lists the same
// names (a test, names_test.cc, checks that each one is documented there).
//
// Each list row: X(constant, "value", "one-line description").
#pragma once

#include <string_view>

namespace tessera::names {

inline constexpr std::string_view kDomain = "tessera.dev";

// Extended resources a container asks for in resources.limits.
#define TESSERA_RESOURCE_NAMES(X)                                                       \
  X(kResourceGpu, "tessera.dev/gpu", "whole GPUs, never shared (integer)")              \
  X(kResourceGpuMemory, "tessera.dev/gpu-memory",                                       \
    "GPU memory on one shared GPU, a Kubernetes quantity in bytes (4Gi)")               \
  X(kResourceGpuCores, "tessera.dev/gpu-cores",                                         \
    "compute share of one GPU in percent, 1-100")                                       \
  X(kResourceGpuSlot, "tessera.dev/gpu-slot",                                           \
    "device-plugin slot of a shared GPU; added by the mutating webhook, never by users")

// Annotations. Pod annotations unless the description says otherwise.
#define TESSERA_ANNOTATIONS(X)                                                               \
  X(kAnnotationDecision, "tessera.dev/decision",                                            \
    "the scheduler's placement decision, JSON (schema tessera.dev/decision/v1)")            \
  X(kAnnotationDecisionSignature, "tessera.dev/decision-signature",                         \
    "Ed25519 signature of the decision annotation's bytes by the scheduler's key, base64")  \
  X(kAnnotationPriority, "tessera.dev/priority",                                            \
    "tessera priority class: latency-critical, normal or best-effort")                      \
  X(kAnnotationMode, "tessera.dev/mode", "requested sharing mode: shared, mps, exclusive, mig") \
  X(kAnnotationMpsUser, "tessera.dev/mps-user",                                             \
    "user ID the pod's GPU processes run as; required for mode mps")                        \
  X(kAnnotationInventory, "tessera.dev/gpu-inventory",                                      \
    "Node annotation: the node agent's GPU inventory, JSON (schema tessera.dev/inventory/v1)") \
  X(kAnnotationGpuCordon, "tessera.dev/gpu-cordon",                                         \
    "Node annotation: comma-separated GPU UUIDs the scheduler must not place on")           \
  X(kAnnotationKaiGpuMemory, "gpu-memory",                                                  \
    "KAI-Scheduler compatible: GPU memory in MiB (\"2000\")")                               \
  X(kAnnotationKaiGpuFraction, "gpu-fraction",                                              \
    "KAI-Scheduler compatible: share of one GPU's memory, (0, 1] (\"0.5\")")

// Labels.
#define TESSERA_LABELS(X)                                                               \
  X(kLabelTrust, "tessera.dev/trust",                                                   \
    "Namespace label naming a trust tier; honoured only if the policy file says so")    \
  X(kLabelGpuNode, "tessera.dev/gpu-node", "Node label: the node runs tessera-node (\"true\")")

// Environment variables.
#define TESSERA_ENV_VARS(X)                                                                  \
  X(kEnvLimitsFile, "TESSERA_LIMITS_FILE",                                                   \
    "path of the limits file (default /etc/tessera/limits); set by the node agent")          \
  X(kEnvRegionFile, "TESSERA_REGION_FILE",                                                   \
    "path of the shared usage region (default /run/tessera/region)")                         \
  X(kEnvHookLogLevel, "TESSERA_HOOK_LOG_LEVEL", "preload library log level: error, warn, info, debug") \
  X(kEnvHookStats, "TESSERA_HOOK_STATS",                                                     \
    "1: the preload library prints its start-up times and per-hook call counts at exit")     \
  X(kEnvHookLibrary, "TESSERA_HOOK_LIBRARY",                                                 \
    "tessera run: path of libtessera-cuda.so (default: beside the tessera binary)")          \
  X(kEnvPolicyFile, "TESSERA_POLICY_FILE", "the administrator's policy file for CLIs and daemons") \
  X(kEnvHamiMemoryLimit, "CUDA_DEVICE_MEMORY_LIMIT",                                         \
    "HAMi-core compatible memory cap for every device (4096m = 4 GiB; g/m/k = GiB/MiB/KiB)") \
  X(kEnvHamiMemoryLimitPrefix, "CUDA_DEVICE_MEMORY_LIMIT_",                                  \
    "HAMi-core compatible memory cap for device <i> (suffix: the CUDA index)")               \
  X(kEnvHamiSmLimit, "CUDA_DEVICE_SM_LIMIT", "HAMi-core compatible compute share in percent")

// Files and folders.
#define TESSERA_PATHS(X)                                                                 \
  X(kPathLimitsFile, "/etc/tessera/limits",                                              \
    "in the container: the node-written limits file, mounted read-only")                 \
  X(kPathRegionFile, "/run/tessera/region", "in the container: the shared usage region") \
  X(kPathHostState, "/var/lib/tessera",                                                  \
    "on the node: tessera-node's state; per device-plugin slot slots/<device>/{limits,run/region}") \
  X(kPathDevicePluginDir, "/var/lib/kubelet/device-plugins",                             \
    "on the node: kubelet's device-plugin folder; tessera-node serves tessera-gpu-slot.sock, tessera-gpu.sock") \
  X(kPathPodResourcesSocket, "/var/lib/kubelet/pod-resources/kubelet.sock",              \
    "on the node: kubelet's PodResources API, which names the pod holding a slot")       \
  X(kPathCdiSpecDir, "/var/run/cdi",                                                     \
    "on the node: CDI specs; tessera-node writes tessera.dev-gpu-<device>.json (kind tessera.dev/gpu)") \
  X(kPathLdSoPreload, "/etc/ld.so.preload",                                              \
    "in the container: names the preload library, mounted read-only")                    \
  X(kPathHookLibrary, "/usr/local/lib/tessera/libtessera-cuda.so",                       \
    "in the container: the preload library, mounted read-only")                          \
  X(kPathMpsPipe, "/run/tessera-mps/pipe",                                             \
    "in an MPS container: the node's MPS daemon's pipe folder (node: <state>/mps/<gpu>/pipe)") \
  X(kPathPolicyFile, "/etc/tessera/policy.yaml", "on the control plane: the policy file")

// Reasons of the Kubernetes Events tessera-node posts.
#define TESSERA_EVENT_REASONS(X)                                                                  \
  X(kEventDecisionRejected, "TesseraDecisionRejected",                                         \
    "a container got no GPU: its decision is missing, malformed, unverifiable or not for it")  \
  X(kEventMemoryOverCap, "TesseraMemoryOverCap",                                               \
    "NVML shows a container above its decision's memory cap (drift enforcement acted)")       \
  X(kEventUnattributedProcess, "TesseraUnattributedProcess",                                   \
    "a process holds memory on a tessera GPU and belongs to no tessera container (on the Node)") \
  X(kEventGpuUnhealthy, "TesseraGpuUnhealthy",                                                 \
    "the GPU a container runs on turned unhealthy (XID or ECC); nothing new is placed there")

#define TESSERA_NAMES_DECLARE(constant, value, description) \
  inline constexpr std::string_view constant = value;
TESSERA_RESOURCE_NAMES(TESSERA_NAMES_DECLARE)
TESSERA_ANNOTATIONS(TESSERA_NAMES_DECLARE)
TESSERA_LABELS(TESSERA_NAMES_DECLARE)
TESSERA_ENV_VARS(TESSERA_NAMES_DECLARE)
TESSERA_PATHS(TESSERA_NAMES_DECLARE)
TESSERA_EVENT_REASONS(TESSERA_NAMES_DECLARE)
#undef TESSERA_NAMES_DECLARE

// Every name above with its description, for `tessera names` and the documentation test.
struct NameInfo {
  std::string_view kind;
  std::string_view value;
  std::string_view description;
};

inline constexpr NameInfo kAllNames[] = {
#define TESSERA_NAMES_INFO_RESOURCE(c, v, d) {"resource", v, d},
#define TESSERA_NAMES_INFO_ANNOTATION(c, v, d) {"annotation", v, d},
#define TESSERA_NAMES_INFO_LABEL(c, v, d) {"label", v, d},
#define TESSERA_NAMES_INFO_ENV(c, v, d) {"env", v, d},
#define TESSERA_NAMES_INFO_PATH(c, v, d) {"path", v, d},
#define TESSERA_NAMES_INFO_EVENT(c, v, d) {"event", v, d},
    TESSERA_RESOURCE_NAMES(TESSERA_NAMES_INFO_RESOURCE)
    TESSERA_ANNOTATIONS(TESSERA_NAMES_INFO_ANNOTATION)
    TESSERA_LABELS(TESSERA_NAMES_INFO_LABEL)
    TESSERA_ENV_VARS(TESSERA_NAMES_INFO_ENV)
    TESSERA_PATHS(TESSERA_NAMES_INFO_PATH)
    TESSERA_EVENT_REASONS(TESSERA_NAMES_INFO_EVENT)
#undef TESSERA_NAMES_INFO_RESOURCE
#undef TESSERA_NAMES_INFO_ANNOTATION
#undef TESSERA_NAMES_INFO_LABEL
#undef TESSERA_NAMES_INFO_ENV
#undef TESSERA_NAMES_INFO_PATH
#undef TESSERA_NAMES_INFO_EVENT
};

}  // namespace tessera::names
