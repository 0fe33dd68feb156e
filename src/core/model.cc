#include "tessera/model.h"

#include "tessera/quantity.h"

namespace tessera {
Status UnknownNameError(std::string_view text, std::string_view what, const std::string& accepted) {
  const bool vowel =
      !what.empty() && std::string_view("aeiou").find(what.front()) != std::string_view::npos;
  return InvalidArgumentError("\"" + QuoteForMessage(text) + "\" is not " + (vowel ? "an " : "a ") +
                              std::string(what) + "; accepted: " + accepted);
}

std::string_view Name(TrustTier tier) { return ToString(tier); }
std::string_view Name(SharingMode mode) { return ToString(mode); }
std::string_view Name(PriorityClass priority) { return ToString(priority); }
std::string_view Name(ComputeMode mode) { return ToString(mode); }

StatusOr<TrustTier> ParseTrustTier(std::string_view text) {
  return ParseEnum<TrustTier>(text, "trust tier");
}
StatusOr<SharingMode> ParseSharingMode(std::string_view text) {
  return ParseEnum<SharingMode>(text, "sharing mode");
}
StatusOr<PriorityClass> ParsePriorityClass(std::string_view text) {
  return ParseEnum<PriorityClass>(text, "priority class");
}
StatusOr<ComputeMode> ParseComputeMode(std::string_view text) {
  return ParseEnum<ComputeMode>(text, "compute mode");
}

std::string AcceptedTrustTiers() { return AcceptedNames<TrustTier>(); }
std::string AcceptedSharingModes() { return AcceptedNames<SharingMode>(); }
std::string AcceptedPriorityClasses() { return AcceptedNames<PriorityClass>(); }
std::string AcceptedComputeModes() { return AcceptedNames<ComputeMode>(); }

}  // namespace tessera
