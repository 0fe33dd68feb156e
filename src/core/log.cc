#include "tessera/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <unistd.h>

#include "tessera/quantity.h"

namespace tessera::log {
namespace {

std::atomic<Level> g_level{Level::kWarn};
std::atomic<Sink> g_sink{nullptr};

constexpr std::size_t kLineMax = 1024;

void WriteStderr(Level level, Component component, std::string_view line) {
  char buffer[kLineMax + 96];
  const int prefix = std::snprintf(buffer, sizeof(buffer), "[tessera %.*s pid=%d %.*s] ",
                                   static_cast<int>(Name(component).size()), Name(component).data(),
                                   static_cast<int>(getpid()), static_cast<int>(Name(level).size()),
                                   Name(level).data());
  if (prefix < 0) return;
  std::size_t used = static_cast<std::size_t>(prefix);
  const std::size_t room = sizeof(buffer) - used - 1;
  const std::size_t n = line.size() < room ? line.size() : room;
  std::memcpy(buffer + used, line.data(), n);
  used += n;
  buffer[used++] = '\n';
  // One write per line so lines of concurrent processes do not interleave.
  const ssize_t ignored = write(STDERR_FILENO, buffer, used);
  (void)ignored;
}

}  // namespace

std::string_view Name(Level level) {
  switch (level) {
#define TESSERA_LOG_CASE(name, text) \
  case Level::name:                  \
    return text;
    TESSERA_LOG_LEVELS(TESSERA_LOG_CASE)
#undef TESSERA_LOG_CASE
  }
  return "unknown";
}

std::string_view Name(Component component) {
  switch (component) {
#define TESSERA_LOG_CASE(name, text) \
  case Component::name:              \
    return text;
    TESSERA_LOG_COMPONENTS(TESSERA_LOG_CASE)
#undef TESSERA_LOG_CASE
  }
  return "unknown";
}

StatusOr<Level> ParseLevel(std::string_view text) {
#define TESSERA_LOG_PARSE(name, value) \
  if (text == (value)) return Level::name;
  TESSERA_LOG_LEVELS(TESSERA_LOG_PARSE)
#undef TESSERA_LOG_PARSE
  return InvalidArgumentError("\"" + QuoteForMessage(text) +
                              "\" is not a log level; accepted: error, warn, info, debug");
}

void SetLevel(Level level) { g_level.store(level, std::memory_order_relaxed); }
Level GetLevel() { return g_level.load(std::memory_order_relaxed); }
void SetSink(Sink sink) { g_sink.store(sink, std::memory_order_release); }

void Logf(Level level, Component component, const char* format, ...) {
  char line[kLineMax];
  va_list args;
  va_start(args, format);
  const int n = std::vsnprintf(line, sizeof(line), format, args);
  va_end(args);
  if (n < 0) return;
  const std::size_t length =
      static_cast<std::size_t>(n) < sizeof(line) ? static_cast<std::size_t>(n) : sizeof(line) - 1;
  const Sink sink = g_sink.load(std::memory_order_acquire);
  (sink != nullptr ? sink : WriteStderr)(level, component, std::string_view(line, length));
}

}  // namespace tessera::log
