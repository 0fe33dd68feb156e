// Fuzzes tessera-scheduler's extender verbs with arbitrary request bodies, against a small
// ledger: nothing may crash or throw, and the ledger must never put more on a GPU than it has.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <nlohmann/json.hpp>

#include "contract/contract_testing.h"
#include "extender/extender.h"
#include "testutil/fake_clock.h"

namespace {

class NullWriter : public tessera::extender::PodWriter {
 public:
  tessera::Status Bind(const std::string&, const std::string&, const std::string&,
                       const std::string&, const std::map<std::string, std::string>&) override {
    return tessera::Status::Ok();
  }
  tessera::StatusOr<std::string> NodeNameOf(const std::string&, const std::string&,
                                            const std::string&) override {
    return std::string();
  }
};

tessera::contract::Signer NewSigner() {
  auto signer = tessera::contract::Signer::FromPem(*tessera::contract::GenerateSigningKeyPem());
  return std::move(*signer);
}

struct World {
  tessera::testutil::FakeClock clock;  // time stands still
  tessera::extender::Ledger ledger{tessera::policy::DefaultPolicy(),
                                   tessera::extender::LedgerOptions{}, clock};
  NullWriter writer;
  tessera::contract::Signer signer = NewSigner();
  tessera::extender::Extender extender{&ledger, &writer, &signer, "fuzz", [] { return 0; }};
  World() {
    ledger.UpsertNode(tessera::contract::testing::MakeNode("n0", 2, std::uint64_t{16} << 30));
    ledger.UpsertNode(tessera::contract::testing::MakeNode("n1", 1, std::uint64_t{8} << 30));
    extender.SetSynced(true);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static World* world = new World;
  if (size == 0) return 0;
  const std::uint8_t verb = data[0] % 5;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  nlohmann::json args = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (args.is_discarded()) return 0;
  try {
    switch (verb) {
      case 0:
        (void)world->extender.Filter(args);
        break;
      case 1:
        (void)world->extender.Prioritize(args);
        break;
      case 2:
        (void)world->extender.Bind(args);
        break;
      case 3:
        (void)world->extender.Preempt(args);
        break;
      default:
        world->ledger.ObservePod(args);
        break;
    }
  } catch (const std::exception&) {
    std::abort();
  }
  for (const auto& gpu : world->ledger.Books()) {
    if (gpu.memory_used > gpu.memory_bytes || gpu.milli_used > 1000 || gpu.milli_used < 0) {
      std::abort();
    }
  }
  return 0;
}
