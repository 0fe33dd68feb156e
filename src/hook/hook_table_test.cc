// The tables generated from cuda_hooks.def and nvml_hooks.def: every row counted and in order,
// the name lookup the dlsym override uses, the real-pointer -> trampoline table, and what the
// exported cuGetProcAddress answers for a name, a CUDA version and the per-thread flag.
#include "hook/hook_table.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "fakes/proc_address_rule.h"
#include "hook/name_table.h"
#include "hook/nvml_table.h"
#include "hook/state.h"

namespace tessera::hook {
namespace {

// One row of a .def file as written in the source text, read without the preprocessor.
struct DefRow {
  std::string symbol;
  std::string base;  // empty for NVML rows
  int since = 0;
  std::string variant;
  std::string policy;
};

std::vector<std::string> SplitTopLevel(const std::string& args) {
  std::vector<std::string> fields;
  std::string field;
  int depth = 0;
  for (char c : args) {
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c == ',' && depth == 0) {
      fields.push_back(field);
      field.clear();
      continue;
    }
    if (!(field.empty() && c == ' ')) field.push_back(c);
  }
  fields.push_back(field);
  return fields;
}

// Every line of `file` that starts with `macro(`, split into its arguments.
std::vector<std::vector<std::string>> ReadDefRows(const char* file, const std::string& macro) {
  std::ifstream in(std::string(TESSERA_HOOK_SOURCE_DIR) + "/" + file);
  EXPECT_TRUE(in.good()) << file;
  std::vector<std::vector<std::string>> rows;
  std::string line;
  const std::string prefix = macro + "(";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    const std::size_t close = line.rfind(')');
    rows.push_back(SplitTopLevel(line.substr(prefix.size(), close - prefix.size())));
  }
  return rows;
}

std::vector<DefRow> CudaDefRows() {
  std::vector<DefRow> rows;
  for (const auto& f : ReadDefRows("cuda_hooks.def", "TESSERA_CUDA_HOOK")) {
    EXPECT_EQ(f.size(), 7u) << f[0];
    if (f.size() != 7) continue;
    DefRow row;
    row.symbol = f[0];
    row.base = f[1].size() >= 2 ? f[1].substr(1, f[1].size() - 2) : f[1];  // unquote
    row.since = std::stoi(f[2]);
    row.variant = f[3];
    row.policy = f[4];
    rows.push_back(row);
  }
  return rows;
}

std::string_view VariantName(Variant v) {
  return v == Variant::kPerThreadStream ? "kPerThreadStream" : "kLegacyStream";
}

std::string_view PolicyName(Policy p) {
  switch (p) {
    case Policy::kPassThrough:
      return "kPassThrough";
    case Policy::kEnforce:
      return "kEnforce";
    case Policy::kGovern:
      return "kGovern";
  }
  return "?";
}

TEST(HookTableTest, EveryCudaRowOfTheDefFileIsGeneratedInOrder) {
  const std::vector<DefRow> rows = CudaDefRows();
  ASSERT_GT(rows.size(), 50u);  // the file was found and read
  EXPECT_EQ(kCudaHookCount, rows.size());
  EXPECT_EQ(std::size(kCudaHooks), rows.size());
  for (std::size_t i = 0; i < rows.size() && i < kCudaHookCount; ++i) {
    SCOPED_TRACE(rows[i].symbol);
    EXPECT_EQ(kCudaHooks[i].symbol, rows[i].symbol);
    EXPECT_EQ(kCudaHooks[i].base, rows[i].base);
    EXPECT_EQ(kCudaHooks[i].since, rows[i].since);
    EXPECT_EQ(VariantName(kCudaHooks[i].variant), rows[i].variant);
    EXPECT_EQ(PolicyName(kCudaHooks[i].policy), rows[i].policy);
  }
}

TEST(HookTableTest, EveryNvmlRowOfTheDefFileIsGeneratedInOrder) {
  const auto rows = ReadDefRows("nvml_hooks.def", "TESSERA_NVML_HOOK");
  ASSERT_GT(rows.size(), 5u);
  EXPECT_EQ(kNvmlHookCount, rows.size());
  EXPECT_EQ(std::size(kNvmlHooks), rows.size());
  for (std::size_t i = 0; i < rows.size() && i < kNvmlHookCount; ++i) {
    EXPECT_EQ(kNvmlHooks[i].symbol, rows[i][0]);
    EXPECT_EQ(PolicyName(kNvmlHooks[i].policy), rows[i][1]);
  }
}

// The enum, the row array and the trampoline array agree for every row.
TEST(HookTableTest, EnumRowAndTrampolineOfEverySymbolAgree) {
#define TESSERA_CUDA_HOOK(sym, base, since, variant, policy, params, args)     \
  EXPECT_EQ(kCudaHooks[static_cast<std::size_t>(CudaHook::sym)].symbol, #sym); \
  EXPECT_EQ(kCudaTrampolines[static_cast<std::size_t>(CudaHook::sym)],         \
            reinterpret_cast<void*>(&::sym))                                   \
      << #sym;
#include "hook/cuda_hooks.def"
#undef TESSERA_CUDA_HOOK
#define TESSERA_NVML_HOOK(sym, policy, params, args)                           \
  EXPECT_EQ(kNvmlHooks[static_cast<std::size_t>(NvmlHook::sym)].symbol, #sym); \
  EXPECT_EQ(kNvmlTrampolines[static_cast<std::size_t>(NvmlHook::sym)],         \
            reinterpret_cast<void*>(&::sym))                                   \
      << #sym;
#include "hook/nvml_hooks.def"
#undef TESSERA_NVML_HOOK
}

// exports.map exports cu* and nvml*, and the dlsym override tests those prefixes first: a row
// named otherwise would be neither exported nor answered.
TEST(HookTableTest, SymbolsCarryTheExportedPrefixes) {
  for (const auto& row : kCudaHooks) EXPECT_EQ(row.symbol.substr(0, 2), "cu") << row.symbol;
  for (const auto& row : kNvmlHooks) EXPECT_EQ(row.symbol.substr(0, 4), "nvml") << row.symbol;
}

// cuGetProcAddress picks a row by (base, version, variant): two rows of one base with the same
// version and variant would make the driver's answer ambiguous; a symbol names its base.
TEST(HookTableTest, RowsOfOneBaseDifferInVersionOrVariant) {
  std::set<std::tuple<std::string_view, int, Variant>> seen;
  std::set<std::string_view> symbols;
  for (const auto& row : kCudaHooks) {
    EXPECT_TRUE(seen.emplace(row.base, row.since, row.variant).second) << row.symbol;
    EXPECT_TRUE(symbols.insert(row.symbol).second) << "duplicate " << row.symbol;
    EXPECT_EQ(row.symbol.substr(0, row.base.size()), row.base) << row.symbol;
  }
}

TEST(HookTableTest, FindsEveryHookedSymbolByName) {
  for (std::size_t i = 0; i < kCudaHookCount; ++i) {
    EXPECT_EQ(FindCudaHookByName(kCudaHooks[i].symbol), static_cast<CudaHook>(i))
        << kCudaHooks[i].symbol;
  }
  for (std::size_t i = 0; i < kNvmlHookCount; ++i) {
    EXPECT_EQ(FindNvmlHookByName(kNvmlHooks[i].symbol), static_cast<NvmlHook>(i))
        << kNvmlHooks[i].symbol;
  }
}

TEST(HookTableTest, UnknownNamesAreNotFound) {
  // A base name that is not itself a hooked export (the legacy cuMemAlloc), near misses, the
  // other library's names: all pass through dlsym untouched.
  for (std::string_view name : {"", "c", "cu", "cuMemAlloc", "cuMemAlloc_v3", "cuMemAlloc_v2 ",
                                "CUMEMALLOC_V2", "cuMemAlloc_v", "nvmlInit_v2", "dlsym"}) {
    EXPECT_EQ(FindCudaHookByName(name), CudaHook::kCount) << "'" << name << "'";
  }
  for (std::string_view name : {"", "nvml", "nvmlInit", "nvmlInit_v3", "cuInit"}) {
    EXPECT_EQ(FindNvmlHookByName(name), NvmlHook::kCount) << "'" << name << "'";
  }
}

TEST(NameTableTest, Fnv1aMatchesTheReferenceVectors) {
  EXPECT_EQ(Fnv1a(""), 0x811c9dc5u);
  EXPECT_EQ(Fnv1a("a"), 0xe40c292cu);
  EXPECT_EQ(Fnv1a("foobar"), 0xbf9cf968u);
}

// Names that all hash to the last slot of a small table: the probe wraps around to the start,
// every member is still found, and a missing name of the same slot stops at the first hole.
TEST(NameTableTest, CollidingNamesProbeAroundTheTable) {
  constexpr std::size_t kSize = 16;
  std::vector<std::string> colliding;
  for (int i = 0; colliding.size() < 5 && i < 100000; ++i) {
    std::string name = "sym" + std::to_string(i);
    if ((Fnv1a(name) & (kSize - 1)) == kSize - 1) colliding.push_back(name);
  }
  ASSERT_EQ(colliding.size(), 5u);
  const std::array<std::string_view, 4> names = {colliding[0], colliding[1], colliding[2],
                                                 colliding[3]};
  const auto table = BuildNameTable<kSize>(names);
  for (std::size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(FindName(table, names, names[i]), i) << names[i];
  }
  EXPECT_EQ(FindName(table, names, colliding[4]), names.size());
  EXPECT_EQ(FindName(table, names, "not-there"), names.size());
  std::size_t used = 0;
  for (auto slot : table) used += slot != 0 ? 1u : 0u;
  EXPECT_EQ(used, names.size());
  EXPECT_NE(table[kSize - 1], 0u);  // the home slot
  EXPECT_NE(table[0], 0u);          // wrapped
}

// Fake "driver" entry points: one distinct address per row.
char g_fake_entry[kCudaHookCount];
char g_unhooked_entry;  // an export of the driver that tessera does not hook

void* FakeReal(std::size_t row) { return &g_fake_entry[row]; }

// The driver's cuGetProcAddress over the rows (test/fakes/proc_address_rule.h), with "cuMemcpy"
// as an export tessera does not hook.
CUresult FakeDriverLookup(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                          CUdriverProcAddressQueryResult* status) {
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  *pfn = nullptr;
  if (std::strcmp(symbol, "cuMemcpy") == 0) {
    *pfn = &g_unhooked_entry;
    if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
  }
  bool known = false;
  const int best = fake::DriverProcAddressRow(symbol, cuda_version, per_thread, &known);
  if (best < 0) {
    if (status != nullptr) {
      *status =
          known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    }
    return CUDA_ERROR_NOT_FOUND;
  }
  // The driver answers with its own entry point, which for cuGetProcAddress itself is the
  // function tessera resolved for that row.
  *pfn = g_real_cuda[best];
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
  return CUDA_SUCCESS;
}

CUresult FakeGetProcAddressV2(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                              CUdriverProcAddressQueryResult* status) {
  return FakeDriverLookup(symbol, pfn, cuda_version, flags, status);
}

CUresult FakeGetProcAddress(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags) {
  return FakeDriverLookup(symbol, pfn, cuda_version, flags, nullptr);
}

// Fills the real-function table as initialization would (with fake entry points), and marks the
// library initialized so the exported functions do not try to load a driver.
class TrampolineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::copy(std::begin(g_real_cuda), std::end(g_real_cuda), saved_.begin());
    saved_initialized_ = g_initialized.load();
    for (std::size_t i = 0; i < kCudaHookCount; ++i) g_real_cuda[i] = FakeReal(i);
    Set(CudaHook::cuGetProcAddress_v2, reinterpret_cast<void*>(&FakeGetProcAddressV2));
    Set(CudaHook::cuGetProcAddress, reinterpret_cast<void*>(&FakeGetProcAddress));
    IndexRealFunctions();
    g_initialized.store(true);
  }
  void TearDown() override {
    std::copy(saved_.begin(), saved_.end(), std::begin(g_real_cuda));
    IndexRealFunctions();
    g_initialized.store(saved_initialized_);
  }
  static void Set(CudaHook hook, void* real) { g_real_cuda[static_cast<std::size_t>(hook)] = real; }

  // What the exported cuGetProcAddress_v2 answers.
  static void* ProcAddress(const char* symbol, int version, bool per_thread = false,
                           CUresult* result = nullptr,
                           CUdriverProcAddressQueryResult* status = nullptr) {
    void* pfn = nullptr;
    CUdriverProcAddressQueryResult ignored = CU_GET_PROC_ADDRESS_SUCCESS;
    const CUresult r = ::cuGetProcAddress_v2(
        symbol, &pfn, version, per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0,
        status != nullptr ? status : &ignored);
    if (result != nullptr) *result = r;
    return pfn;
  }

  std::array<void*, kCudaHookCount> saved_{};
  bool saved_initialized_ = false;
};

template <typename Fn>
void* Addr(Fn fn) {
  return reinterpret_cast<void*>(fn);
}

TEST_F(TrampolineTest, EveryRealEntryPointMapsToItsRowsTrampoline) {
  for (std::size_t i = 0; i < kCudaHookCount; ++i) {
    EXPECT_EQ(TrampolineForReal(g_real_cuda[i]), kCudaTrampolines[i]) << kCudaHooks[i].symbol;
  }
  EXPECT_EQ(TrampolineForReal(nullptr), nullptr);
  EXPECT_EQ(TrampolineForReal(&g_unhooked_entry), &g_unhooked_entry);  // not ours: unchanged
}

TEST_F(TrampolineTest, EntryPointsTheDriverLacksAreNotIndexed) {
  for (std::size_t i = 0; i < kCudaHookCount; i += 2) g_real_cuda[i] = nullptr;
  IndexRealFunctions();
  for (std::size_t i = 0; i < kCudaHookCount; ++i) {
    void* const fake = FakeReal(i);
    if (i % 2 == 0) {
      EXPECT_EQ(TrampolineForReal(fake), fake) << kCudaHooks[i].symbol;
    } else if (g_real_cuda[i] == fake) {
      EXPECT_EQ(TrampolineForReal(fake), kCudaTrampolines[i]) << kCudaHooks[i].symbol;
    }
  }
}

TEST_F(TrampolineTest, GetProcAddressAnswersTheVersionedTrampoline) {
  EXPECT_EQ(ProcAddress("cuMemAlloc", 12000), Addr(&::cuMemAlloc_v2));
  EXPECT_EQ(ProcAddress("cuMemFree", 3020), Addr(&::cuMemFree_v2));
  EXPECT_EQ(ProcAddress("cuDeviceGetUuid", 11030), Addr(&::cuDeviceGetUuid));
  EXPECT_EQ(ProcAddress("cuDeviceGetUuid", 11040), Addr(&::cuDeviceGetUuid_v2));
  EXPECT_EQ(ProcAddress("cuCtxCreate", 11000), Addr(&::cuCtxCreate_v2));
  EXPECT_EQ(ProcAddress("cuCtxCreate", 12000), Addr(&::cuCtxCreate_v3));
  EXPECT_EQ(ProcAddress("cuCtxCreate", 12080), Addr(&::cuCtxCreate_v4));
  EXPECT_EQ(ProcAddress("cuEventElapsedTime", 12000), Addr(&::cuEventElapsedTime));
  EXPECT_EQ(ProcAddress("cuEventElapsedTime", 12080), Addr(&::cuEventElapsedTime_v2));
  // CUDA 13's runtime synchronizes a device through the context's _v2 (a fence before it).
  EXPECT_EQ(ProcAddress("cuCtxSynchronize", 12090), Addr(&::cuCtxSynchronize));
  EXPECT_EQ(ProcAddress("cuCtxSynchronize", 13000), Addr(&::cuCtxSynchronize_v2));
  // The runtime's bootstrap: cuGetProcAddress asked for itself.
  EXPECT_EQ(ProcAddress("cuGetProcAddress", 11080), Addr(&::cuGetProcAddress));
  EXPECT_EQ(ProcAddress("cuGetProcAddress", 12000), Addr(&::cuGetProcAddress_v2));
}

TEST_F(TrampolineTest, GetProcAddressAnswersThePerThreadVariantWhenAsked) {
  EXPECT_EQ(ProcAddress("cuLaunchKernel", 12000), Addr(&::cuLaunchKernel));
  EXPECT_EQ(ProcAddress("cuLaunchKernel", 12000, true), Addr(&::cuLaunchKernel_ptsz));
  EXPECT_EQ(ProcAddress("cuMemcpyHtoD", 12000, true), Addr(&::cuMemcpyHtoD_v2_ptds));
  EXPECT_EQ(ProcAddress("cuMemAllocAsync", 11020, true), Addr(&::cuMemAllocAsync_ptsz));
  // No per-thread row: the legacy one, whatever the flag.
  EXPECT_EQ(ProcAddress("cuMemAlloc", 12000, true), Addr(&::cuMemAlloc_v2));
}

TEST_F(TrampolineTest, GetProcAddressPassesUnhookedAndUnknownNamesThrough) {
  CUresult r = CUDA_ERROR_UNKNOWN;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  EXPECT_EQ(ProcAddress("cuMemcpy", 12000, false, &r, &status), &g_unhooked_entry);
  EXPECT_EQ(r, CUDA_SUCCESS);

  EXPECT_EQ(ProcAddress("cuNoSuchFunction", 12000, false, &r, &status), nullptr);
  EXPECT_EQ(r, CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);

  EXPECT_EQ(ProcAddress("cuMemAllocAsync", 11000, false, &r, &status), nullptr);
  EXPECT_EQ(r, CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
}

TEST_F(TrampolineTest, LegacyGetProcAddressAnswersTrampolinesToo) {
  void* pfn = nullptr;
  EXPECT_EQ(::cuGetProcAddress("cuMemAlloc", &pfn, 12000, 0), CUDA_SUCCESS);
  EXPECT_EQ(pfn, Addr(&::cuMemAlloc_v2));
  EXPECT_EQ(::cuGetProcAddress("cuStreamSynchronize", &pfn, 12000,
                               CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM),
            CUDA_SUCCESS);
  EXPECT_EQ(pfn, Addr(&::cuStreamSynchronize_ptsz));
}

TEST_F(TrampolineTest, GetProcAddressWithoutTheRealOneIsNotFound) {
  Set(CudaHook::cuGetProcAddress_v2, nullptr);
  CUresult r = CUDA_SUCCESS;
  EXPECT_EQ(ProcAddress("cuMemAlloc", 12000, false, &r), nullptr);
  EXPECT_EQ(r, CUDA_ERROR_NOT_FOUND);
}

}  // namespace
}  // namespace tessera::hook
