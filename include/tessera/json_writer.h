// A small JSON writer for the dependency-free parts (the inventory, `tessera doctor`), which
// build on hosts without a JSON library. Writes; never parses.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

namespace tessera {

// `text` as a JSON string (quotes, escapes, control characters as \u00XX).
inline void AppendJsonString(std::string& out, std::string_view text) {
  out += '"';
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (u < 0x20) {
          static constexpr char kHex[] = "0123456789abcdef";
          out += "\\u00";
          out += kHex[u >> 4];
          out += kHex[u & 0xf];
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

// One JSON object's fields, in the order written; commas between them. The object closes when
// the writer goes out of scope (nested writers close first).
class ObjectWriter {
 public:
  explicit ObjectWriter(std::string& out) : out_(out) { out_ += '{'; }
  ~ObjectWriter() { out_ += '}'; }
  ObjectWriter(const ObjectWriter&) = delete;
  ObjectWriter& operator=(const ObjectWriter&) = delete;

  void Str(std::string_view key, std::string_view value) { AppendJsonString(Field(key), value); }
  template <typename Integer>
  void Num(std::string_view key, Integer value) {
    Field(key) += std::to_string(value);
  }
  // A number with up to `digits` significant digits ("%.*g").
  void Real(std::string_view key, double value, int digits = 15) {
    char text[40];
    std::snprintf(text, sizeof(text), "%.*g", digits, value);
    Field(key) += text;
  }
  void Bool(std::string_view key, bool value) { Field(key) += value ? "true" : "false"; }
  // Starts a field and returns the output for its value (an array, a nested object).
  std::string& Field(std::string_view key) {
    if (!first_) out_ += ',';
    first_ = false;
    AppendJsonString(out_, key);
    out_ += ':';
    return out_;
  }

 private:
  std::string& out_;
  bool first_ = true;
};

// Writes a JSON array of `items`, each through `write(item, out)` (which appends one value).
template <typename Items, typename Write>
void AppendJsonArray(std::string& out, const Items& items, Write write) {
  out += '[';
  bool first = true;
  for (const auto& item : items) {
    if (!first) out += ',';
    first = false;
    write(item, out);
  }
  out += ']';
}

}  // namespace tessera
