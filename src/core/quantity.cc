#include "tessera/quantity.h"

#include <array>
#include <cstdio>
#include <optional>

namespace tessera {
namespace {

__extension__ using Uint128 = unsigned __int128;

constexpr std::string_view kQuantityForm =
    "accepted: a non-negative number with an optional suffix Ki, Mi, Gi, Ti, Pi, Ei (x1024), "
    "k, M, G, T, P, E (x1000), m (/1000) or an exponent e<n>, written without spaces "
    "(e.g. 4Gi, 1.5Gi, 500M, 1e9, 4096)";
constexpr std::string_view kPercentForm =
    "accepted: a whole number of percent, optionally followed by % (e.g. 30 or 30%)";
constexpr std::string_view kKaiMemoryForm =
    "accepted: a whole number of MiB (e.g. \"2000\"), or a quantity with a suffix (e.g. 4Gi)";
constexpr std::string_view kKaiFractionForm =
    "accepted: a decimal share of one GPU greater than 0 and at most 1, with at most six "
    "decimals (e.g. 0.5, 0.25)";

constexpr std::size_t kMaxSignificantDigits = 20;  // M < 10^20 < 2^67, so M * 2^60 fits 128 bits
constexpr int kMaxExponent = 1000;

struct Suffix {
  std::string_view text;
  int decimal_exponent;
  int binary_exponent;
};
constexpr std::array<Suffix, 13> kSuffixes = {{
    {"Ki", 0, 10},
    {"Mi", 0, 20},
    {"Gi", 0, 30},
    {"Ti", 0, 40},
    {"Pi", 0, 50},
    {"Ei", 0, 60},
    {"m", -3, 0},
    {"k", 3, 0},
    {"M", 6, 0},
    {"G", 9, 0},
    {"T", 12, 0},
    {"P", 15, 0},
    {"E", 18, 0},
}};

Status Invalid(std::string_view text, std::string_view what, std::string_view form) {
  std::string message = "\"" + QuoteForMessage(text) + "\" ";
  message += what;
  message += "; ";
  message += form;
  return InvalidArgumentError(std::move(message));
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Rejects the mistakes every parser shares: empty, non-ASCII, spaces, a sign.
Status CheckCharacters(std::string_view text, std::string_view form, bool allow_plus) {
  if (text.empty()) return Invalid(text, "is empty", form);
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    char where[48];
    std::snprintf(where, sizeof(where), " at position %zu", i);
    if (byte >= 0x80) return Invalid(text, std::string("contains a non-ASCII byte") + where, form);
    if (byte == ' ' || byte == '\t' || byte == '\n' || byte == '\r') {
      return Invalid(text, std::string("contains whitespace") + where, form);
    }
    if (byte < 0x20 || byte == 0x7f) {
      return Invalid(text, std::string("contains a control character") + where, form);
    }
  }
  if (text[0] == '-') return Invalid(text, "is negative (must be 0 or more)", form);
  if (text[0] == '+' && !allow_plus) return Invalid(text, "has a sign", form);
  return Status::Ok();
}

// A decimal number "123.456" split into significant digits and a power of ten.
struct Decimal {
  Uint128 mantissa = 0;
  int exponent = 0;        // value = mantissa * 10^exponent
  std::size_t length = 0;  // characters consumed
};

StatusOr<Decimal> ParseDecimal(std::string_view whole, std::string_view text,
                               std::string_view form) {
  std::string digits;  // significant digits, leading zeros dropped
  int exponent = 0;
  bool seen_digit = false;
  bool seen_point = false;
  std::size_t i = 0;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '.') {
      if (seen_point) return Invalid(whole, "has more than one decimal point", form);
      seen_point = true;
      continue;
    }
    if (!IsDigit(c)) break;
    seen_digit = true;
    if (seen_point) --exponent;
    if (digits.empty() && c == '0') continue;
    digits.push_back(c);
  }
  if (!seen_digit) return Invalid(whole, "does not start with a number", form);
  if (seen_point && (text[i - 1] == '.')) {
    return Invalid(whole, "has a decimal point with no digits after it", form);
  }
  while (!digits.empty() && digits.back() == '0') {
    digits.pop_back();
    ++exponent;
  }
  if (digits.size() > kMaxSignificantDigits) {
    return Invalid(whole, "has too many significant digits (at most 20)", form);
  }
  Decimal out;
  for (char c : digits) out.mantissa = out.mantissa * 10 + static_cast<unsigned>(c - '0');
  if (out.mantissa == 0) exponent = 0;
  out.exponent = exponent;
  out.length = i;
  return out;
}

std::optional<Suffix> FindSuffix(std::string_view text) {
  for (const Suffix& s : kSuffixes) {
    if (text == s.text) return s;
  }
  return std::nullopt;
}

// "e12", "E-3", "e+2" -> 12, -3, 2.
std::optional<int> ParseExponent(std::string_view text) {
  if (text.size() < 2 || (text[0] != 'e' && text[0] != 'E')) return std::nullopt;
  std::size_t i = 1;
  bool negative = false;
  if (text[i] == '+' || text[i] == '-') {
    negative = text[i] == '-';
    ++i;
  }
  if (i >= text.size()) return std::nullopt;
  int value = 0;
  for (; i < text.size(); ++i) {
    if (!IsDigit(text[i])) return std::nullopt;
    value = value * 10 + (text[i] - '0');
    if (value > kMaxExponent) return kMaxExponent + 1;
  }
  return negative ? -value : value;
}

}  // namespace

std::string QuoteForMessage(std::string_view text) {
  constexpr std::size_t kMaxShown = 64;
  std::string out;
  for (std::size_t i = 0; i < text.size() && i < kMaxShown; ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte < 0x20 || byte >= 0x7f || byte == '"' || byte == '\\') {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\x%02x", byte);
      out += escaped;
    } else {
      out.push_back(static_cast<char>(byte));
    }
  }
  if (text.size() > kMaxShown) out += "...";
  return out;
}

StatusOr<std::uint64_t> ParseQuantity(std::string_view text) {
  TESSERA_RETURN_IF_ERROR(CheckCharacters(text, kQuantityForm, /*allow_plus=*/true));
  std::string_view rest = text[0] == '+' ? text.substr(1) : text;
  TESSERA_ASSIGN_OR_RETURN(Decimal number, ParseDecimal(text, rest, kQuantityForm));
  const std::string_view suffix_text = rest.substr(number.length);

  int decimal_exponent = number.exponent;
  int binary_exponent = 0;
  if (!suffix_text.empty()) {
    if (const auto suffix = FindSuffix(suffix_text)) {
      decimal_exponent += suffix->decimal_exponent;
      binary_exponent = suffix->binary_exponent;
    } else if (const auto exponent = ParseExponent(suffix_text)) {
      if (*exponent > kMaxExponent || *exponent < -kMaxExponent) {
        return Invalid(text, "has an exponent out of range", kQuantityForm);
      }
      decimal_exponent += *exponent;
    } else {
      return Invalid(text, "has an unknown suffix \"" + QuoteForMessage(suffix_text) + "\"",
                     kQuantityForm);
    }
  }

  Uint128 value = number.mantissa << binary_exponent;
  if (value == 0) return std::uint64_t{0};
  const auto too_large = [&] {
    return Invalid(text, "is too large (at most 9223372036854775807 units, about 8Ei)",
                   kQuantityForm);
  };
  if (decimal_exponent >= 0) {
    for (int i = 0; i < decimal_exponent; ++i) {
      if (value > kMaxQuantity) return too_large();
      value *= 10;
    }
  } else {
    // Round up to a whole unit, as Kubernetes' Quantity.Value() does.
    constexpr int kMaxPow10 = 38;  // 10^38 < 2^128
    if (-decimal_exponent > kMaxPow10) return std::uint64_t{1};
    Uint128 divisor = 1;
    for (int i = 0; i < -decimal_exponent; ++i) divisor *= 10;
    value = value / divisor + (value % divisor != 0 ? 1 : 0);
  }
  if (value > kMaxQuantity) return too_large();
  return static_cast<std::uint64_t>(value);
}

std::string FormatQuantity(std::uint64_t value) {
  static constexpr std::array<std::string_view, 6> kBinary = {"Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
  std::size_t best = kBinary.size();
  for (std::size_t i = 0; i < kBinary.size(); ++i) {
    const std::uint64_t unit = 1ULL << (10 * (i + 1));
    if (value != 0 && value % unit == 0) best = i;
  }
  if (best == kBinary.size()) return std::to_string(value);
  return std::to_string(value >> (10 * (best + 1))) + std::string(kBinary[best]);
}

std::string FormatBytesHuman(std::uint64_t bytes) {
  static constexpr std::array<std::string_view, 7> kUnits = {"B",   "KiB", "MiB", "GiB",
                                                             "TiB", "PiB", "EiB"};
  std::size_t unit = 0;
  while (unit + 1 < kUnits.size() && bytes >= (1ULL << (10 * (unit + 1)))) ++unit;
  char out[48];
  if (unit == 0) {
    std::snprintf(out, sizeof(out), "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    const double scaled = static_cast<double>(bytes) / static_cast<double>(1ULL << (10 * unit));
    std::snprintf(out, sizeof(out), "%.2f %s", scaled, std::string(kUnits[unit]).c_str());
  }
  return out;
}

StatusOr<std::uint64_t> ParseUnsigned(std::string_view text, std::uint64_t max) {
  if (text.empty() || text.size() > 20) return InvalidArgumentError("not a number");
  std::uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return InvalidArgumentError("not a number");
    const auto digit = static_cast<std::uint64_t>(c - '0');
    if (v > (max - digit) / 10) return InvalidArgumentError("too large");
    v = v * 10 + digit;
  }
  return v;
}

StatusOr<std::uint32_t> ParsePercent(std::string_view text) {
  TESSERA_RETURN_IF_ERROR(CheckCharacters(text, kPercentForm, /*allow_plus=*/false));
  std::string_view digits = text;
  if (digits.back() == '%') digits.remove_suffix(1);
  if (digits.empty()) return Invalid(text, "has no number before %", kPercentForm);
  std::uint64_t value = 0;
  for (char c : digits) {
    if (c == '.') return Invalid(text, "is not a whole number of percent", kPercentForm);
    if (!IsDigit(c)) return Invalid(text, "is not a number of percent", kPercentForm);
    value = value * 10 + static_cast<unsigned>(c - '0');
    if (value > 1'000'000) return Invalid(text, "is too large", kPercentForm);
  }
  return static_cast<std::uint32_t>(value);
}

StatusOr<std::uint64_t> ParseKaiGpuMemory(std::string_view text) {
  TESSERA_RETURN_IF_ERROR(CheckCharacters(text, kKaiMemoryForm, /*allow_plus=*/false));
  bool plain = true;
  for (char c : text) plain = plain && IsDigit(c);
  if (!plain) {
    auto bytes = ParseQuantity(text);
    if (!bytes.ok()) {
      return Invalid(text, "is neither a whole number of MiB nor a quantity", kKaiMemoryForm);
    }
    return bytes;
  }
  if (text.size() > 19) return Invalid(text, "is too large", kKaiMemoryForm);
  std::uint64_t mib = 0;
  for (char c : text) mib = mib * 10 + static_cast<unsigned>(c - '0');
  if (mib > kMaxQuantity / kMiB) return Invalid(text, "is too large", kKaiMemoryForm);
  return mib * kMiB;
}

StatusOr<std::uint32_t> ParseKaiGpuFraction(std::string_view text) {
  TESSERA_RETURN_IF_ERROR(CheckCharacters(text, kKaiFractionForm, /*allow_plus=*/false));
  TESSERA_ASSIGN_OR_RETURN(Decimal number, ParseDecimal(text, text, kKaiFractionForm));
  if (number.length != text.size()) {
    return Invalid(text, "is not a decimal number", kKaiFractionForm);
  }
  if (number.exponent < -6) return Invalid(text, "has more than six decimals", kKaiFractionForm);
  Uint128 ppm = number.mantissa;
  for (int i = 0; i < number.exponent + 6; ++i) {
    ppm *= 10;
    if (ppm > kFractionOne) break;
  }
  if (ppm == 0) return Invalid(text, "is zero", kKaiFractionForm);
  if (ppm > kFractionOne) {
    return Invalid(text, "is more than one GPU (ask for whole GPUs with tessera.dev/gpu instead)",
                   kKaiFractionForm);
  }
  return static_cast<std::uint32_t>(ppm);
}

}  // namespace tessera
