// CUDA graphs and external memory. A graph's memory nodes are allocated by the driver when the
// executable graph is uploaded or launched, not by an allocation call we see; so the sum of the
// graph's memory-alloc nodes, per device, is reserved when the graph is instantiated and
// returned when the executable graph is destroyed (conservative: the driver may reuse one
// physical reserve across graphs; the node agent reconciles with NVML).
#include <array>
#include <vector>

#include "hook/accounting.h"
#include "hook/intercept.h"

namespace tessera::hook {
namespace {

constexpr int kMaxGraphDevices = 16;

// Bytes of memory-alloc nodes of `graph`, per CUDA device.
std::array<std::uint64_t, kMaxGraphDevices> GraphAllocations(CUgraph graph) {
  std::array<std::uint64_t, kMaxGraphDevices> bytes{};
  const auto get_nodes = Real<CudaHook::cuGraphGetNodes>();
  const auto get_type = Real<CudaHook::cuGraphNodeGetType>();
  const auto get_params = Real<CudaHook::cuGraphMemAllocNodeGetParams>();
  if (get_nodes == nullptr || get_type == nullptr || get_params == nullptr) return bytes;
  size_t count = 0;
  if (get_nodes(graph, nullptr, &count) != CUDA_SUCCESS || count == 0) return bytes;
  std::vector<CUgraphNode> nodes(count);
  if (get_nodes(graph, nodes.data(), &count) != CUDA_SUCCESS) return bytes;
  for (std::size_t i = 0; i < count && i < nodes.size(); ++i) {
    CUgraphNodeType type{};
    if (get_type(nodes[i], &type) != CUDA_SUCCESS || type != CU_GRAPH_NODE_TYPE_MEM_ALLOC) continue;
    CUDA_MEM_ALLOC_NODE_PARAMS params{};
    if (get_params(nodes[i], &params) != CUDA_SUCCESS) continue;
    const int dev = params.poolProps.location.id;
    if (dev >= 0 && dev < kMaxGraphDevices) bytes[static_cast<std::size_t>(dev)] += params.bytesize;
  }
  return bytes;
}

// One record per (executable graph, device).
CUdeviceptr GraphKey(CUgraphExec exec, int dev) {
  return (static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(exec)) << 4) |
         static_cast<CUdeviceptr>(dev);
}

template <typename Call>
CUresult ChargedInstantiate(CUgraphExec* exec, CUgraph graph, Call call) {
  const auto bytes = GraphAllocations(graph);
  std::array<DeviceQuota, kMaxGraphDevices> charged{};
  const auto roll_back = [&](int upto) {
    for (int d = 0; d < upto; ++d) {
      if (charged[static_cast<std::size_t>(d)].limited)
        ReleaseBytes(charged[static_cast<std::size_t>(d)], bytes[static_cast<std::size_t>(d)]);
    }
  };
  for (int d = 0; d < kMaxGraphDevices; ++d) {
    const std::uint64_t n = bytes[static_cast<std::size_t>(d)];
    if (n == 0) continue;
    const DeviceQuota quota = QuotaForDevice(d);
    if (!quota.limited) continue;
    if (quota.refuse || !ReserveBytes(quota, n, "CUDA graph memory nodes").ok()) {
      roll_back(d);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    charged[static_cast<std::size_t>(d)] = quota;
  }
  const CUresult r = call();
  if (r != CUDA_SUCCESS) {
    roll_back(kMaxGraphDevices);
    return r;
  }
  for (int d = 0; d < kMaxGraphDevices; ++d) {
    const DeviceQuota& q = charged[static_cast<std::size_t>(d)];
    if (q.limited)
      RecordAllocation(GraphKey(*exec, d), q.region_device, bytes[static_cast<std::size_t>(d)],
                       Table::kHandles);
  }
  return r;
}

}  // namespace

template <>
CUresult Intercept<CudaHook::cuGraphInstantiateWithFlags>(CUgraphExec* exec, CUgraph graph,
                                                          unsigned long long flags) {
  EnsureInitialized();
  const auto real = Real<CudaHook::cuGraphInstantiateWithFlags>();
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  return ChargedInstantiate(exec, graph, [&] { return real(exec, graph, flags); });
}

template <>
CUresult Intercept<CudaHook::cuGraphInstantiateWithParams>(CUgraphExec* exec, CUgraph graph,
                                                           CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  EnsureInitialized();
  const auto real = Real<CudaHook::cuGraphInstantiateWithParams>();
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  return ChargedInstantiate(exec, graph, [&] { return real(exec, graph, params); });
}

template <>
CUresult Intercept<CudaHook::cuGraphInstantiateWithParams_ptsz>(
    CUgraphExec* exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  EnsureInitialized();
  const auto real = Real<CudaHook::cuGraphInstantiateWithParams_ptsz>();
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  return ChargedInstantiate(exec, graph, [&] { return real(exec, graph, params); });
}

template <>
CUresult Intercept<CudaHook::cuGraphExecDestroy>(CUgraphExec exec) {
  EnsureInitialized();
  const auto real = Real<CudaHook::cuGraphExecDestroy>();
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  std::array<std::pair<int, std::uint64_t>, kMaxGraphDevices> held{};
  for (int d = 0; d < kMaxGraphDevices; ++d) {
    auto& h = held[static_cast<std::size_t>(d)];
    h.first = -1;
    TakeAllocation(GraphKey(exec, d), &h.first, &h.second, Table::kHandles);
  }
  const CUresult r = real(exec);
  for (int d = 0; d < kMaxGraphDevices; ++d) {
    const auto& h = held[static_cast<std::size_t>(d)];
    if (h.first < 0) continue;
    if (r != CUDA_SUCCESS) {
      RecordAllocation(GraphKey(exec, d), h.first, h.second, Table::kHandles);
      continue;
    }
    DeviceQuota quota;
    quota.limited = true;
    quota.region_device = h.first;
    ReleaseBytes(quota, h.second);
  }
  return r;
}

template <>
CUresult Intercept<CudaHook::cuImportExternalMemory>(CUexternalMemory* memory,
                                                     const CUDA_EXTERNAL_MEMORY_HANDLE_DESC* desc) {
  EnsureInitialized();
  const auto real = Real<CudaHook::cuImportExternalMemory>();
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  const auto call = [&] { return real(memory, desc); };
  CUdevice dev = 0;
  const auto get_device = Real<CudaHook::cuCtxGetDevice>();
  if (desc == nullptr || memory == nullptr || get_device == nullptr ||
      get_device(&dev) != CUDA_SUCCESS) {
    return call();
  }
  return ChargedOnDevice(dev, desc->size, "cuImportExternalMemory", Table::kHandles, call, [&] {
    return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(*memory));
  });
}

template <>
CUresult Intercept<CudaHook::cuDestroyExternalMemory>(CUexternalMemory memory) {
  EnsureInitialized();
  const auto real = Real<CudaHook::cuDestroyExternalMemory>();
  if (real == nullptr) return CUDA_ERROR_NOT_FOUND;
  return Uncharged(static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(memory)),
                   Table::kHandles, [&] { return real(memory); });
}

}  // namespace tessera::hook
