// Charging helpers shared by the enforcing hooks (memory, graphs, external memory):
// reserve -> driver call -> record, or roll back; and the matching release.
#pragma once

#include "hook/intercept.h"

namespace tessera::hook {

// Charges `bytes` on CUDA device `dev` around `call`, recording the result under `key(table)`.
template <typename Call, typename Key>
CUresult ChargedOnDevice(CUdevice dev, std::uint64_t bytes, const char* what, Table table,
                         Call call, Key key) {
  const DeviceQuota quota = QuotaForDevice(dev);
  if (!quota.limited) return call();
  if (quota.refuse || ChargeContextOnce(dev, nullptr) != CUDA_SUCCESS ||
      !ReserveBytes(quota, bytes, what).ok()) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const CUresult r = call();
  if (r != CUDA_SUCCESS) {
    ReleaseBytes(quota, bytes);
    return r;
  }
  RecordAllocation(key(), quota.region_device, bytes, table);
  return r;
}

// Returns what was recorded under `key` once the driver has freed it.
template <typename Call>
CUresult Uncharged(CUdeviceptr key, Table table, Call call) {
  int device = -1;
  std::uint64_t bytes = 0;
  const bool tracked = TakeAllocation(key, &device, &bytes, table);
  const CUresult r = call();
  if (!tracked) return r;
  if (r != CUDA_SUCCESS) {
    RecordAllocation(key, device, bytes, table);  // still allocated
    return r;
  }
  DeviceQuota quota;
  quota.limited = true;
  quota.region_device = device;
  ReleaseBytes(quota, bytes);
  return r;
}

}  // namespace tessera::hook
