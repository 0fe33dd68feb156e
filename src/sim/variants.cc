#include "sim/variants.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "tessera/text.h"

#include "placement/random.h"

namespace tessera::sim {
namespace {

std::string Quote(std::string_view s) { return "\"" + std::string(s) + "\""; }

std::string Where(std::string_view file, std::size_t line) {
  return std::string(file) + ":" + std::to_string(line) + ": ";
}

bool ValidName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (const char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return true;
}

StatusOr<double> ParseNumber(std::string_view text, double lo, double hi, std::string_view what) {
  double v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || !(v >= lo) ||
      !(v <= hi)) {
    char range[64];
    std::snprintf(range, sizeof(range), "%g..%g", lo, hi);
    return InvalidInputError(std::string(what) + ": " + Quote(text) + " is not a number in " +
                             range);
  }
  return v;
}

// Uniform draws for the generator: splitmix64 through Go's reductions (placement::Rand), so a
// variant is the same bytes on every platform.
class Draws {
 public:
  explicit Draws(std::uint64_t seed)
      : rand_(std::make_unique<placement::SplitMixSource>(seed ^ 0x7465737365726176ULL)) {}
  std::size_t Index(std::size_t n) {  // uniform in [0, n), n < 2^31
    return static_cast<std::size_t>(rand_.Intn(static_cast<int>(n)));
  }
  double Unit() {  // uniform in [0, 1)
    return static_cast<double>(rand_.Int63() >> 10) / static_cast<double>(1ULL << 53);
  }

 private:
  placement::Rand rand_;
};

// Draws from `pool` with weight (GPU count)^tilt (tilt 0: uniform).
class Picker {
 public:
  Picker(const std::vector<const TracePod*>& pool, double tilt) : pool_(pool) {
    double sum = 0;
    for (const TracePod* p : pool_) {
      sum += std::pow(static_cast<double>(std::max<std::uint32_t>(p->num_gpu, 1)), tilt);
      cumulative_.push_back(sum);
    }
    uniform_ = tilt == 0;
  }
  const TracePod& Draw(Draws& draws) const {
    if (uniform_) return *pool_[draws.Index(pool_.size())];
    const double u = draws.Unit() * cumulative_.back();
    const auto it = std::upper_bound(cumulative_.begin(), cumulative_.end(), u);
    const auto i =
        std::min<std::size_t>(static_cast<std::size_t>(it - cumulative_.begin()), pool_.size() - 1);
    return *pool_[i];
  }

 private:
  std::vector<const TracePod*> pool_;
  std::vector<double> cumulative_;
  bool uniform_ = true;
};

}  // namespace

std::string_view Name(VariantFamily family) {
  switch (family) {
    case VariantFamily::kResample:
      return "resample";
    case VariantFamily::kSkew:
      return "skew";
    case VariantFamily::kShift:
      return "shift";
  }
  return "?";
}

StatusOr<std::vector<VariantSpec>> ParseRecipe(std::string_view text, std::string_view file) {
  std::vector<VariantSpec> specs;
  std::set<std::string> names;
  std::size_t line_no = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (const std::size_t hash = line.find('#'); hash != std::string_view::npos) {
      line = line.substr(0, hash);
    }
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const std::vector<std::string_view> words = SplitWords(line);
    if (words.empty()) continue;
    const std::string at = Where(file, line_no);
    constexpr std::string_view kForm =
        " (want: NAME FAMILY base=LIST share=X [to=X] [tilt=X] [total=X] seed=N "
        "set=tuning|held-out)";
    if (words.size() < 2)
      return InvalidInputError(at + "a variant needs a name and a family" + std::string(kForm));
    VariantSpec spec;
    spec.name = std::string(words[0]);
    if (!ValidName(spec.name)) {
      return InvalidInputError(at + "name: " + Quote(spec.name) +
                               ": want 1-64 characters of a-z, 0-9 and -");
    }
    if (!names.insert(spec.name).second) {
      return InvalidInputError(at + "name: " + Quote(spec.name) + " is used twice");
    }
    if (words[1] == "resample") {
      spec.family = VariantFamily::kResample;
    } else if (words[1] == "skew") {
      spec.family = VariantFamily::kSkew;
    } else if (words[1] == "shift") {
      spec.family = VariantFamily::kShift;
    } else {
      return InvalidInputError(at + "family: " + Quote(words[1]) +
                               "; accepted: resample, skew, shift");
    }
    std::map<std::string, std::string_view> fields;
    for (std::size_t i = 2; i < words.size(); ++i) {
      const std::size_t eq = words[i].find('=');
      if (eq == std::string_view::npos) {
        return InvalidInputError(at + Quote(words[i]) + ": want KEY=VALUE" + std::string(kForm));
      }
      const std::string key(words[i].substr(0, eq));
      if (!fields.emplace(key, words[i].substr(eq + 1)).second) {
        return InvalidInputError(at + key + ": given twice");
      }
    }
    const bool shift = spec.family == VariantFamily::kShift;
    const bool skew = spec.family == VariantFamily::kSkew;
    std::vector<std::string> allowed = {"base", "share", "seed", "set"};
    if (shift) allowed.insert(allowed.end(), {"to", "total"});
    if (skew) allowed.emplace_back("tilt");
    for (const auto& [key, value] : fields) {
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        std::string list;
        for (const std::string& a : allowed) list += (list.empty() ? "" : ", ") + a;
        return InvalidInputError(at + Quote(key) + ": not a field of family " +
                                 std::string(Name(spec.family)) + " (its fields: " + list + ")");
      }
    }
    for (const std::string& key : allowed) {
      if (!fields.contains(key)) {
        return InvalidInputError(at + key + ": missing" + std::string(kForm));
      }
    }
    spec.base = std::string(fields["base"]);
    if (!ValidName(spec.base)) {
      return InvalidInputError(at + "base: " + Quote(spec.base) +
                               ": want a pod list's name, e.g. default");
    }
    TESSERA_ASSIGN_OR_RETURN(spec.share, ParseNumber(fields["share"], 0, 0.95, at + "share"));
    if (shift) {
      TESSERA_ASSIGN_OR_RETURN(spec.to, ParseNumber(fields["to"], 0, 0.95, at + "to"));
      TESSERA_ASSIGN_OR_RETURN(spec.total, ParseNumber(fields["total"], 0.1, 10, at + "total"));
    }
    if (skew) {
      TESSERA_ASSIGN_OR_RETURN(spec.tilt, ParseNumber(fields["tilt"], -8, 8, at + "tilt"));
    }
    const std::string_view seed = fields["seed"];
    const auto [ptr, ec] = std::from_chars(seed.data(), seed.data() + seed.size(), spec.seed);
    if (seed.empty() || ec != std::errc() || ptr != seed.data() + seed.size()) {
      return InvalidInputError(at + "seed: " + Quote(seed) + " is not an unsigned integer");
    }
    if (fields["set"] == "tuning") {
      spec.held_out = false;
    } else if (fields["set"] == "held-out") {
      spec.held_out = true;
    } else {
      return InvalidInputError(at + "set: " + Quote(fields["set"]) +
                               "; accepted: tuning, held-out");
    }
    specs.push_back(std::move(spec));
  }
  if (specs.empty()) return InvalidInputError(std::string(file) + ": no variant in the recipe");
  return specs;
}

StatusOr<std::vector<TracePod>> MakeVariant(const VariantSpec& spec,
                                            const std::vector<TracePod>& base,
                                            std::int64_t capacity_milli) {
  std::vector<const TracePod*> singles;
  std::vector<const TracePod*> multis;
  for (const TracePod& p : base) (p.num_gpu >= 2 ? multis : singles).push_back(&p);
  if (singles.empty() || (multis.empty() && (spec.share > 0 || spec.to > 0))) {
    return InvalidInputError(
        "variant " + Quote(spec.name) + ": base list " + Quote(spec.base) + " has no " +
        (singles.empty() ? "single-GPU or CPU-only" : "multi-GPU") + " pod to draw from");
  }
  Draws draws(spec.seed);
  const Picker single(singles, 0);
  const Picker multi(multis, spec.family == VariantFamily::kSkew ? spec.tilt : 0);
  std::vector<TracePod> out;
  if (spec.family == VariantFamily::kShift) {
    // Track the running share: a multi-GPU pod whenever the multi-GPU milli so far is below
    // what the linear share would have asked for by now, a single otherwise.
    const double total = spec.total * static_cast<double>(capacity_milli);
    double asked = 0;
    double asked_multi = 0;
    while (asked < total) {
      const double t = asked / total;
      const double want = total * (spec.share * t + (spec.to - spec.share) * t * t / 2);
      const TracePod& p = asked_multi < want ? multi.Draw(draws) : single.Draw(draws);
      out.push_back(p);
      asked += static_cast<double>(p.total_milli());
      if (p.num_gpu >= 2) asked_multi += static_cast<double>(p.total_milli());
    }
  } else {
    double single_milli = 0;
    for (std::size_t i = 0; i < singles.size(); ++i) {
      out.push_back(single.Draw(draws));
      single_milli += static_cast<double>(out.back().total_milli());
    }
    const double want = single_milli * spec.share / (1 - spec.share);
    double multi_milli = 0;
    while (multi_milli < want) {
      out.push_back(multi.Draw(draws));
      multi_milli += static_cast<double>(out.back().total_milli());
    }
    // Mixed, so that name order is a stationary mix too.
    for (std::size_t i = out.size(); i > 1; --i) std::swap(out[i - 1], out[draws.Index(i)]);
  }
  char suffix[32];
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::snprintf(suffix, sizeof(suffix), "-%06zu", i);
    out[i].name = spec.name + suffix;
  }
  return out;
}

double MultiGpuShare(const std::vector<TracePod>& pods) {
  double all = 0;
  double multi = 0;
  for (const TracePod& p : pods) {
    all += static_cast<double>(p.total_milli());
    if (p.num_gpu >= 2) multi += static_cast<double>(p.total_milli());
  }
  return all > 0 ? multi / all : 0;
}

std::string PodCsv(const std::vector<TracePod>& pods) {
  std::ostringstream out;
  out << "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n";
  for (const TracePod& p : pods) {
    out << p.name << ',' << p.cpu_milli << ',' << p.memory_mib << ',' << p.num_gpu << ','
        << p.gpu_milli << ',' << p.spec_key << '\n';
  }
  return out.str();
}

}  // namespace tessera::sim
