// Every name tessera puts on the wire or on disk, defined once. docs/protocol.md lists the same
// names (a test, names_test.cc, checks that each one is documented there).
//
// Each list row: X(constant, "value", "one-line description").
#pragma once

#include <string_view>

namespace tessera::names {

inline constexpr std::string_view kDomain = "tessera.dev";

// Extended resources a container asks for in resources.limits.
#define TESSERA_RESOURCE_NAMES(X)                                                             \
  X(kResourceGpu, "tessera.dev/gpu", "whole GPUs, never shared (integer)")                    \
  X(kResourceGpuMemory, "tessera.dev/gpu-memory",                                             \
    "GPU memory on one shared GPU, a Kubernetes quantity in bytes (4Gi)")                     \
  X(kResourceGpuCores, "tessera.dev/gpu-cores", "compute share of one GPU in percent, 1-100") \
  X(kResourceGpuSlot, "tessera.dev/gpu-slot",                                                 \
    "device-plugin slot of a shared GPU; added by the mutating webhook, never by users")

// Annotations. Pod annotations unless the description says otherwise.
#define TESSERA_ANNOTATIONS(X)                                                                  \
  X(kAnnotationDecision, "tessera.dev/decision",                                                \
    "the scheduler's placement decision, JSON (schema tessera.dev/decision/v1)")                \
  X(kAnnotationDecisionSignature, "tessera.dev/decision-signature",                             \
    "Ed25519 signature of the decision annotation's bytes by the scheduler's key, base64")      \
  X(kAnnotationPriority, "tessera.dev/priority",                                                \
    "tessera priority class: latency-critical, normal or best-effort")                          \
  X(kAnnotationMode, "tessera.dev/mode", "requested sharing mode: shared, mps, exclusive, mig") \
  X(kAnnotationCompute, "tessera.dev/compute",                                                  \
    "how the gpu-cores share is held: hard (default) or work-conserving")                       \
  X(kAnnotationComputeWindow, "tessera.dev/compute-window-ms",                                  \
    "a hard share's period in ms, 10-60000: cores% of each period's GPU time, then held")       \
  X(kAnnotationMpsUser, "tessera.dev/mps-user",                                                 \
    "user ID the pod's GPU processes run as; required for mode mps")                            \
  X(kAnnotationInventory, "tessera.dev/gpu-inventory",                                          \
    "Node annotation: the node agent's GPU inventory, JSON (schema tessera.dev/inventory/v1)")  \
  X(kAnnotationGpuCordon, "tessera.dev/gpu-cordon",                                             \
    "Node annotation: comma-separated GPU UUIDs the scheduler must not place on")               \
  X(kAnnotationKaiGpuMemory, "gpu-memory",                                                      \
    "KAI-Scheduler compatible: GPU memory in MiB (\"2000\")")                                   \
  X(kAnnotationKaiGpuFraction, "gpu-fraction",                                                  \
    "KAI-Scheduler compatible: share of one GPU's memory, (0, 1] (\"0.5\")")

// Labels.
#define TESSERA_LABELS(X)                                                                       \
  X(kLabelTrust, "tessera.dev/trust",                                                           \
    "Namespace label naming a trust tier; honoured only if the policy file says so")            \
  X(kLabelGpuNode, "tessera.dev/gpu-node", "Node label: the node runs tessera-node (\"true\")") \
  X(kLabelAllocationPath, "tessera.dev/path",                                                   \
    "Node label: how tessera-node hands out the node's GPUs: \"device-plugin\" or \"dra\" "     \
    "(ResourceClaims of gpu.tessera.dev; the extender's ledger leaves such a node out)")

// Dynamic Resource Allocation (resource.k8s.io/v1, docs/design/0022-dra-driver.md): the driver,
// its DeviceClasses, the capacities and attributes of its devices, its opaque config and taint.
#define TESSERA_DRA_NAMES(X)                                                                     \
  X(kDraDriver, "gpu.tessera.dev",                                                               \
    "DRA driver name: ResourceSlices (pool = node name), claims' results, kubelet plugin")       \
  X(kDraClassShared, "shared.gpu.tessera.dev",                                                   \
    "DeviceClass: part of a GPU (capacities memory and cores), time-sliced with its co-tenants") \
  X(kDraClassMps, "mps.gpu.tessera.dev", "DeviceClass: part of a GPU run under the node's MPS")  \
  X(kDraCapacityMemory, "memory",                                                                \
    "device capacity: GPU memory in bytes, contexts included; a claim consumes what it asks")    \
  X(kDraCapacityCores, "cores",                                                                  \
    "device capacity: percent of the GPU's busy time (ADR 0017's share), 0 = no compute share")  \
  X(kDraAttributeUuid, "uuid", "device attribute: the GPU's UUID (string)")                      \
  X(kDraAttributeProduct, "productName", "device attribute: NVML's product name (string)")       \
  X(kDraAttributeNuma, "numaNode", "device attribute: the GPU's NUMA node, -1 unknown (int)")    \
  X(kDraAttributeIndex, "index", "device attribute: the GPU's NVML index (int)")                 \
  X(kDraConfigApiVersion, "gpu.tessera.dev/v1alpha1",                                            \
    "apiVersion of the driver's opaque config (a claim's or class's devices.config[].opaque)")   \
  X(kDraConfigKind, "GpuConfig",                                                                 \
    "kind of the opaque config: priority, compute (hard|work-conserving), windowMs, mpsUser")    \
  X(kDraTaintUnhealthy, "gpu.tessera.dev/unhealthy",                                             \
    "device taint (NoSchedule) on an unhealthy GPU; its value is the reason (XID, ECC)")

// Environment variables.
#define TESSERA_ENV_VARS(X)                                                                        \
  X(kEnvLimitsFile, "TESSERA_LIMITS_FILE",                                                         \
    "path of the limits file (default /etc/tessera/limits); set by the node agent")                \
  X(kEnvRegionFile, "TESSERA_REGION_FILE",                                                         \
    "path of the shared usage region (default /run/tessera/region)")                               \
  X(kEnvHookLogLevel, "TESSERA_HOOK_LOG_LEVEL",                                                    \
    "preload library log level: error, warn, info, debug")                                         \
  X(kEnvHookStats, "TESSERA_HOOK_STATS",                                                           \
    "1: the preload library prints its start-up times and per-hook call counts at exit")           \
  X(kEnvProbeGate, "TESSERA_PROBE_GATE",                                                           \
    "0: the compute governor's probes run without their gate (default: with it; ADR 0017)")        \
  X(kEnvProbeSetupNs, "TESSERA_PROBE_SETUP_NS",                                                    \
    "ns a probe counts for its launch's setup on the GPU beyond its events (default 1050: H200)")  \
  X(kEnvProbeControlNs, "TESSERA_PROBE_CONTROL_NS",                                                \
    "ns the governor's control kernel takes on the GPU (default 576: H200; at least that)")        \
  X(kEnvHookLibrary, "TESSERA_HOOK_LIBRARY",                                                       \
    "tessera run: path of libtessera-cuda.so (default: beside the tessera binary)")                \
  X(kEnvPolicyFile, "TESSERA_POLICY_FILE", "the administrator's policy file for CLIs and daemons") \
  X(kEnvHamiMemoryLimit, "CUDA_DEVICE_MEMORY_LIMIT",                                               \
    "HAMi-core compatible memory cap for every device (4096m = 4 GiB; g/m/k = GiB/MiB/KiB)")       \
  X(kEnvHamiMemoryLimitPrefix, "CUDA_DEVICE_MEMORY_LIMIT_",                                        \
    "HAMi-core compatible memory cap for device <i> (suffix: the CUDA index)")                     \
  X(kEnvHamiSmLimit, "CUDA_DEVICE_SM_LIMIT", "HAMi-core compatible compute share in percent")

// Files and folders.
#define TESSERA_PATHS(X)                                                                       \
  X(kPathLimitsFile, "/etc/tessera/limits",                                                    \
    "in the container: the node-written limits file, mounted read-only")                       \
  X(kPathRegionFile, "/run/tessera/region", "in the container: the shared usage region")       \
  X(kPathHostState, "/var/lib/tessera",                                                        \
    "on the node: tessera-node's state; per device-plugin slot "                               \
    "slots/<device>/{limits,run/region}")                                                      \
  X(kPathDevicePluginDir, "/var/lib/kubelet/device-plugins",                                   \
    "on the node: kubelet's device-plugin folder; tessera-node serves tessera-gpu-slot.sock, " \
    "tessera-gpu.sock")                                                                        \
  X(kPathPodResourcesSocket, "/var/lib/kubelet/pod-resources/kubelet.sock",                    \
    "on the node: kubelet's PodResources API, which names the pod holding a slot")             \
  X(kPathCdiSpecDir, "/var/run/cdi",                                                           \
    "on the node: CDI specs; tessera-node writes tessera.dev-gpu-<device>.json (kind "         \
    "tessera.dev/gpu)")                                                                        \
  X(kPathLdSoPreload, "/etc/ld.so.preload",                                                    \
    "in the container: names the preload library, mounted read-only")                          \
  X(kPathCdiSpecInContainer, "/etc/tessera-cdi.json",                                          \
    "in a GPU container: its slot's CDI spec, mounted read-only by the CDI device itself")     \
  X(kPathHookLibrary, "/usr/local/lib/tessera/libtessera-cuda.so",                             \
    "in the container: the preload library, mounted read-only")                                \
  X(kPathMpsPipe, "/run/tessera-mps/pipe",                                                     \
    "in an MPS container: the node's MPS daemon's pipe folder (node: <state>/mps/<gpu>/pipe)") \
  X(kPathPolicyFile, "/etc/tessera/policy.yaml", "on the control plane: the policy file")      \
  X(kPathDraPluginDir, "/var/lib/kubelet/plugins/gpu.tessera.dev",                             \
    "on the node: the DRA driver's folder; tessera-node serves dra.sock there (ADR 0022)")     \
  X(kPathPluginsRegistry, "/var/lib/kubelet/plugins_registry",                                 \
    "on the node: kubelet's plugin registry; tessera-node serves gpu.tessera.dev-reg.sock")

// Reasons of the Kubernetes Events tessera-node and tessera-scheduler post.
#define TESSERA_EVENT_REASONS(X)                                                                  \
  X(kEventDecisionRejected, "TesseraDecisionRejected",                                            \
    "a container got no GPU: its decision is missing, malformed, unverifiable or not for it")     \
  X(kEventMemoryOverCap, "TesseraMemoryOverCap",                                                  \
    "NVML shows a container above its decision's memory cap (drift enforcement acted)")           \
  X(kEventUnattributedProcess, "TesseraUnattributedProcess",                                      \
    "a process holds memory on a tessera GPU and belongs to no tessera container (on the Node)")  \
  X(kEventGpuUnhealthy, "TesseraGpuUnhealthy",                                                    \
    "the GPU a container runs on turned unhealthy (XID or ECC); nothing new is placed there")     \
  X(kEventGpuMemoryDenied, "TesseraGpuMemoryDenied",                                              \
    "the preload library refused a container's allocations at its memory cap (once per rise)")    \
  X(kEventLaunchFailed, "TesseraLaunchFailed",                                                    \
    "the driver refused a container's kernel launches (e.g. too few SMs under an MPS limit)")     \
  X(kEventGovernorFailed, "TesseraGovernorFailed",                                                \
    "a container's launches found the compute governor failed (they ran ungoverned or waited)")   \
  X(kEventMemoryDrift, "TesseraMemoryDrift",                                                      \
    "NVML shows a container holding more than the preload library accounted (once per episode)")  \
  X(kEventComputeDrift, "TesseraComputeDrift",                                                    \
    "NVML shows a container on the SMs beyond its share, or a process outside the library")       \
  X(kEventComputeUnchecked, "TesseraComputeDriftUnchecked",                                       \
    "NVML's per-process utilization of a GPU could not be read: compute drift is not checked")    \
  X(kEventAdmissionDenied, "TesseraAdmissionDenied",                                              \
    "tessera-scheduler's validating webhook refused a pod; the message names the rule and field") \
  X(kEventLimitsMissing, "TesseraLimitsMissing",                                                  \
    "tessera-node: a container held its slot without the limits file (written again)")            \
  X(kEventCdiNotApplied, "TesseraCdiNotApplied",                                                  \
    "a slot's container runs without its CDI device (the runtime ignored it): it has no GPU")     \
  X(kEventCdiUnresolved, "TesseraCdiUnresolved",                                                  \
    "the runtime could not resolve a slot's CDI device: the container does not start")

// The extender's counters (tessera-scheduler), rows of TESSERA_METRICS kept here so that each one
// is also a member of extender::ExtenderCounters and exposed by /metrics: a counter cannot exist
// without its metric row. Row: X(member, constant, "name", "type", "labels", "help").
#define TESSERA_SCHEDULER_COUNTER_ROWS(R, X)                                                       \
  R(X, decisions, kMetricSchedulerDecisions, "tessera_scheduler_decisions_total", "counter",       \
    "scheduler", "signed decisions bound")                                                         \
  R(X, filters, kMetricSchedulerFilters, "tessera_scheduler_filters_total", "counter",             \
    "scheduler", "Filter calls")                                                                   \
  R(X, filter_errors, kMetricSchedulerFilterErrors, "tessera_scheduler_filter_errors_total",       \
    "counter", "scheduler", "Filter calls answered with an error")                                 \
  R(X, unschedulable, kMetricSchedulerUnschedulable, "tessera_scheduler_unschedulable_total",      \
    "counter", "scheduler", "Filter calls that found no node")                                     \
  R(X, binds, kMetricSchedulerBinds, "tessera_scheduler_binds_total", "counter", "scheduler",      \
    "Bind calls")                                                                                  \
  R(X, bind_failures, kMetricSchedulerBindFailures, "tessera_scheduler_bind_failures_total",       \
    "counter", "scheduler", "Bind calls that failed (the reservation is rolled back)")             \
  R(X, preemptions, kMetricSchedulerPreemptions, "tessera_scheduler_preemptions_total", "counter", \
    "scheduler", "Preempt calls")
#define TESSERA_SCHEDULER_COUNTERS(X) TESSERA_SCHEDULER_COUNTER_ROWS(TESSERA_ROW_WITH_MEMBER, X)
#define TESSERA_ROW_WITH_MEMBER(X, ...) X(__VA_ARGS__)
#define TESSERA_ROW_WITHOUT_MEMBER(X, member, ...) X(__VA_ARGS__)

// Prometheus metric families (docs/protocol.md §metrics). Row: X(constant, "name", "type",
// "labels", "help"). Label sets, compatible with dcgm-exporter's where they overlap so both join:
//   node:      Hostname
//   gpu:       Hostname, gpu (index), UUID, device (nvidia<minor>), modelName
//   container: the gpu labels + namespace, pod, container
#define TESSERA_METRICS(X)                                                                         \
  X(kMetricNodeInfo, "tessera_node_info", "gauge", "node",                                         \
    "1, with the agent's version in label version")                                                \
  X(kMetricGpuMemoryTotal, "tessera_gpu_memory_total_bytes", "gauge", "gpu",                       \
    "the GPU's memory (NVML)")                                                                     \
  X(kMetricGpuMemoryAllocated, "tessera_gpu_memory_allocated_bytes", "gauge", "gpu",               \
    "sum of the memory caps of the containers on the GPU")                                         \
  X(kMetricGpuComputeAllocated, "tessera_gpu_compute_allocated_ratio", "gauge", "gpu",             \
    "sum of the compute shares of the containers on the GPU (1 = the whole GPU)")                  \
  X(kMetricGpuContainers, "tessera_gpu_containers", "gauge", "gpu", "containers on the GPU")       \
  X(kMetricGpuHealthy, "tessera_gpu_healthy", "gauge", "gpu", "1 healthy, 0 XID/ECC unhealthy")    \
  X(kMetricContainerInfo, "tessera_container_gpu_info", "gauge", "container",                      \
    "1, with labels priority, mode and compute (hard or work-conserving)")                         \
  X(kMetricContainerMemoryLimit, "tessera_container_gpu_memory_limit_bytes", "gauge", "container", \
    "the memory cap (from the node-written limits file)")                                          \
  X(kMetricContainerMemoryUsed, "tessera_container_gpu_memory_used_bytes", "gauge", "container",   \
    "memory the preload library accounted (region)")                                               \
  X(kMetricContainerMemoryPeak, "tessera_container_gpu_memory_peak_bytes", "gauge", "container",   \
    "highest accounted memory since the container started (region)")                               \
  X(kMetricContainerMemoryNvml, "tessera_container_gpu_memory_nvml_bytes", "gauge", "container",   \
    "memory NVML says the container's processes hold (the driver's truth)")                        \
  X(kMetricContainerMemoryDrift, "tessera_container_gpu_memory_drift_bytes", "gauge", "container", \
    "NVML minus accounted: memory the preload library did not see (or a rewritten region)")        \
  X(kMetricContainerOomDenials, "tessera_container_gpu_oom_denials_total", "counter", "container", \
    "allocations refused at the cap")                                                              \
  X(kMetricContainerShareTarget, "tessera_container_gpu_compute_share_target_ratio", "gauge",      \
    "container", "the compute share asked (gpu-cores / 100); absent without one")                  \
  X(kMetricContainerShareDelivered, "tessera_container_gpu_compute_share_delivered_ratio",         \
    "gauge", "container", "GPU time of its work per wall second over the agent's last window")     \
  X(kMetricContainerBusy, "tessera_container_gpu_busy_seconds_total", "counter", "container",      \
    "GPU time of its governed work, measured by event fences")                                     \
  X(kMetricContainerThrottled, "tessera_container_gpu_throttled_seconds_total", "counter",         \
    "container", "time its launches waited for its share or a turn")                               \
  X(kMetricContainerPriorityHeld, "tessera_container_gpu_priority_held_seconds_total", "counter",  \
    "container", "time its launches waited for a higher priority class")                           \
  X(kMetricContainerPriorityHolds, "tessera_container_gpu_priority_holds_total", "counter",        \
    "container", "launches that waited for a higher priority class")                               \
  X(kMetricContainerLaunches, "tessera_container_gpu_launches_total", "counter", "container",      \
    "governed launches (kernels, graphs)")                                                         \
  X(kMetricContainerLaunchFailures, "tessera_container_gpu_launch_failures_total", "counter",      \
    "container", "governed launches the driver refused (e.g. too few SMs under an MPS limit)")     \
  X(kMetricContainerGovernorFailures, "tessera_container_gpu_governor_failures_total", "counter",  \
    "container", "launches that found the compute governor failed (fail-open: ran ungoverned)")    \
  X(kMetricContainerGovernorDown, "tessera_container_gpu_governor_down_seconds_total", "counter",  \
    "container", "time launches waited for a failed compute governor (fail-closed tiers)")         \
  X(kMetricNodeOverCap, "tessera_node_drift_over_cap_total", "counter", "node",                    \
    "episodes of a container above its memory cap by NVML")                                        \
  X(kMetricNodeUnattributed, "tessera_node_unattributed_processes_total", "counter", "node",       \
    "processes found on a tessera GPU that belong to no tessera container")                        \
  X(kMetricNodeComputeDrift, "tessera_node_compute_drift_total", "counter", "node",                \
    "episodes of a container using the SMs beyond its grant by NVML (or outside the library)")     \
  X(kMetricNodeDriftKills, "tessera_node_drift_kills_total", "counter", "node",                    \
    "containers whose GPU processes were killed for drift (tier onDrift: kill)")                   \
  X(kMetricNodeDriftEvictions, "tessera_node_drift_evictions_total", "counter", "node",            \
    "pods evicted for drift (tier onDrift: evict)")                                                \
  X(kMetricNodeEventsDropped, "tessera_node_events_dropped_total", "counter", "node",              \
    "Kubernetes Events not posted (API errors)")                                                   \
  TESSERA_SCHEDULER_COUNTER_ROWS(TESSERA_ROW_WITHOUT_MEMBER, X)                                    \
  X(kMetricSchedulerReservations, "tessera_scheduler_reservations", "gauge", "scheduler",          \
    "GPU reservations not yet bound")                                                              \
  X(kMetricSchedulerBoundPods, "tessera_scheduler_bound_pods", "gauge", "scheduler",               \
    "pods holding GPUs")                                                                           \
  X(kMetricSchedulerNodes, "tessera_scheduler_nodes", "gauge", "scheduler",                        \
    "nodes with a usable GPU inventory")                                                           \
  X(kMetricSchedulerRequestSeconds, "tessera_scheduler_request_seconds", "histogram", "scheduler", \
    "time answering kube-scheduler, per verb (label verb)")                                        \
  X(kMetricSchedulerInFlightMax, "tessera_scheduler_requests_max_in_flight", "gauge", "scheduler", \
    "most concurrent requests seen, per verb (label verb)")                                        \
  X(kMetricAdmissionReviews, "tessera_admission_reviews_total", "counter", "scheduler",            \
    "admission reviews answered, per webhook (label webhook: mutate, validate)")                   \
  X(kMetricAdmissionDenials, "tessera_admission_denials_total", "counter", "scheduler",            \
    "admission denials, per rule (label rule)")                                                    \
  X(kMetricAdmissionEventsDropped, "tessera_admission_events_dropped_total", "counter",            \
    "scheduler", "denial Events not posted (queue full or API errors)")

#define TESSERA_NAMES_DECLARE(constant, value, description) \
  inline constexpr std::string_view constant = value;
TESSERA_RESOURCE_NAMES(TESSERA_NAMES_DECLARE)
TESSERA_ANNOTATIONS(TESSERA_NAMES_DECLARE)
TESSERA_LABELS(TESSERA_NAMES_DECLARE)
TESSERA_ENV_VARS(TESSERA_NAMES_DECLARE)
TESSERA_PATHS(TESSERA_NAMES_DECLARE)
TESSERA_EVENT_REASONS(TESSERA_NAMES_DECLARE)
TESSERA_DRA_NAMES(TESSERA_NAMES_DECLARE)
#undef TESSERA_NAMES_DECLARE
#define TESSERA_METRICS_DECLARE(constant, value, type, labels, help) \
  inline constexpr std::string_view constant = value;
TESSERA_METRICS(TESSERA_METRICS_DECLARE)
#undef TESSERA_METRICS_DECLARE

// A metric family's row, for the exposition writers.
struct MetricInfo {
  std::string_view name;
  std::string_view type;    // gauge, counter, histogram
  std::string_view labels;  // node, gpu, container, scheduler
  std::string_view help;
};
inline constexpr MetricInfo kAllMetrics[] = {
#define TESSERA_METRICS_INFO(c, v, t, l, d) {v, t, l, d},
    TESSERA_METRICS(TESSERA_METRICS_INFO)
#undef TESSERA_METRICS_INFO
};

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
#define TESSERA_NAMES_INFO_DRA(c, v, d) {"dra", v, d},
#define TESSERA_NAMES_INFO_METRIC(c, v, t, l, d) {"metric", v, d},
    TESSERA_RESOURCE_NAMES(TESSERA_NAMES_INFO_RESOURCE)
        TESSERA_ANNOTATIONS(TESSERA_NAMES_INFO_ANNOTATION) TESSERA_LABELS(TESSERA_NAMES_INFO_LABEL)
            TESSERA_ENV_VARS(TESSERA_NAMES_INFO_ENV) TESSERA_PATHS(TESSERA_NAMES_INFO_PATH)
                TESSERA_EVENT_REASONS(TESSERA_NAMES_INFO_EVENT)
                    TESSERA_METRICS(TESSERA_NAMES_INFO_METRIC)
                        TESSERA_DRA_NAMES(TESSERA_NAMES_INFO_DRA)
#undef TESSERA_NAMES_INFO_DRA
#undef TESSERA_NAMES_INFO_RESOURCE
#undef TESSERA_NAMES_INFO_ANNOTATION
#undef TESSERA_NAMES_INFO_LABEL
#undef TESSERA_NAMES_INFO_ENV
#undef TESSERA_NAMES_INFO_PATH
#undef TESSERA_NAMES_INFO_EVENT
#undef TESSERA_NAMES_INFO_METRIC
};

}  // namespace tessera::names
