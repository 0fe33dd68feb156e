#include "tessera/model.h"

#include "tessera/quantity.h"

namespace tessera {
namespace {

template <typename Enum, std::size_t N>
std::string_view NameIn(const std::array<EnumRow<Enum>, N>& rows, Enum value) {
  for (const auto& row : rows) {
    if (row.value == value) return row.name;
  }
  return "unknown";
}

template <typename Enum, std::size_t N>
std::string Accepted(const std::array<EnumRow<Enum>, N>& rows) {
  std::string out;
  for (const auto& row : rows) {
    if (!out.empty()) out += ", ";
    out += row.name;
  }
  return out;
}

template <typename Enum, std::size_t N>
StatusOr<Enum> ParseIn(const std::array<EnumRow<Enum>, N>& rows, std::string_view text,
                       std::string_view what) {
  for (const auto& row : rows) {
    if (row.name == text) return row.value;
  }
  std::string message = "\"" + QuoteForMessage(text) + "\" is not a " + std::string(what);
  message += "; accepted: " + Accepted(rows);
  return InvalidArgumentError(std::move(message));
}

}  // namespace

std::string_view Name(TrustTier tier) { return NameIn(kTrustTiers, tier); }
std::string_view Name(SharingMode mode) { return NameIn(kSharingModes, mode); }
std::string_view Name(PriorityClass priority) { return NameIn(kPriorityClasses, priority); }

StatusOr<TrustTier> ParseTrustTier(std::string_view text) {
  return ParseIn(kTrustTiers, text, "trust tier");
}
StatusOr<SharingMode> ParseSharingMode(std::string_view text) {
  return ParseIn(kSharingModes, text, "sharing mode");
}
StatusOr<PriorityClass> ParsePriorityClass(std::string_view text) {
  return ParseIn(kPriorityClasses, text, "priority class");
}

std::string AcceptedTrustTiers() { return Accepted(kTrustTiers); }
std::string AcceptedSharingModes() { return Accepted(kSharingModes); }
std::string AcceptedPriorityClasses() { return Accepted(kPriorityClasses); }

}  // namespace tessera
