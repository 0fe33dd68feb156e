#include "tessera/model.h"

#include "tessera/quantity.h"

namespace tessera {
Status UnknownNameError(std::string_view text, std::string_view what, const std::string& accepted) {
  const bool vowel = !what.empty() && std::string_view("aeiou").find(what.front()) != std::string_view::npos;
  return InvalidArgumentError("\"" + QuoteForMessage(text) + "\" is not " + (vowel ? "an " : "a ") +
                              std::string(what) + "; accepted: " + accepted);
}

std::string_view Name(TrustTier tier) { return NameIn(kTrustTiers, tier); }
std::string_view Name(SharingMode mode) { return NameIn(kSharingModes, mode); }
std::string_view Name(PriorityClass priority) { return NameIn(kPriorityClasses, priority); }
std::string_view Name(ComputeMode mode) { return NameIn(kComputeModes, mode); }

StatusOr<TrustTier> ParseTrustTier(std::string_view text) {
  return ParseIn(kTrustTiers, text, "trust tier");
}
StatusOr<SharingMode> ParseSharingMode(std::string_view text) {
  return ParseIn(kSharingModes, text, "sharing mode");
}
StatusOr<PriorityClass> ParsePriorityClass(std::string_view text) {
  return ParseIn(kPriorityClasses, text, "priority class");
}
StatusOr<ComputeMode> ParseComputeMode(std::string_view text) {
  return ParseIn(kComputeModes, text, "compute mode");
}

std::string AcceptedTrustTiers() { return AcceptedIn(kTrustTiers); }
std::string AcceptedSharingModes() { return AcceptedIn(kSharingModes); }
std::string AcceptedPriorityClasses() { return AcceptedIn(kPriorityClasses); }
std::string AcceptedComputeModes() { return AcceptedIn(kComputeModes); }

}  // namespace tessera
