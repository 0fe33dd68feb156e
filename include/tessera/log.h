// The logging facade. Dependency-free (the preload library links it): each line is formatted
// into a stack buffer and written with one write(2) to stderr, prefixed
// "[tessera <component> pid=<pid> <level>]". Daemons may install another sink.
#pragma once

#include <cstdint>
#include <string_view>

#include "tessera/status.h"

namespace tessera::log {

#define TESSERA_LOG_LEVELS(X) \
  X(kError, "error")          \
  X(kWarn, "warn")            \
  X(kInfo, "info")            \
  X(kDebug, "debug")
#define TESSERA_LOG_COMPONENTS(X) \
  X(kCore, "core")                \
  X(kHook, "hook")                \
  X(kPolicy, "policy")            \
  X(kCli, "cli")                  \
  X(kAgent, "agent")              \
  X(kScheduler, "scheduler")      \
  X(kWebhook, "webhook")          \
  X(kK8s, "k8s")                  \
  X(kGovernor, "governor")

#define TESSERA_LOG_ENUM(name, text) name,
enum class Level : std::uint8_t { TESSERA_LOG_LEVELS(TESSERA_LOG_ENUM) };
enum class Component : std::uint8_t { TESSERA_LOG_COMPONENTS(TESSERA_LOG_ENUM) };
#undef TESSERA_LOG_ENUM

std::string_view Name(Level level);
std::string_view Name(Component component);
StatusOr<Level> ParseLevel(std::string_view text);

// Default kWarn. Not synchronized beyond an atomic: set it before starting threads.
void SetLevel(Level level);
Level GetLevel();
inline bool Enabled(Level level) { return level <= GetLevel(); }

// A sink receives one complete line without the trailing newline.
using Sink = void (*)(Level level, Component component, std::string_view line);
void SetSink(Sink sink);  // nullptr restores the stderr sink

// printf-style; truncates at 1 KiB.
void Logf(Level level, Component component, const char* format, ...)
    __attribute__((format(printf, 3, 4)));

}  // namespace tessera::log

#define TESSERA_LOG(level, component, ...)                                                     \
  do {                                                                                         \
    if (::tessera::log::Enabled(::tessera::log::Level::level)) {                               \
      ::tessera::log::Logf(::tessera::log::Level::level, ::tessera::log::Component::component, \
                           __VA_ARGS__);                                                       \
    }                                                                                          \
  } while (false)
