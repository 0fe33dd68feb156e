// Assertions (CONTRIBUTING.md, "Errors"; Envoy's ASSERT / RELEASE_ASSERT):
//   TESSERA_ASSERT(cond, "why")          an invariant that holds unless tessera has a bug;
//                                        checked in debug builds only (NDEBUG compiles it out)
//   TESSERA_RELEASE_ASSERT(cond, "why")  the process cannot continue (e.g. a layout mismatch in a
//                                        daemon); checked in every build
// A failure writes one line (file, line, condition, reason) to stderr with write(2) and aborts:
// no allocation, no exceptions, so the preload library may use both. Bad input and a failing
// environment are never asserted: they are a Status.
#pragma once

namespace tessera::internal {

[[noreturn]] void AssertFailed(const char* file, int line, const char* condition,
                               const char* reason) noexcept;

}  // namespace tessera::internal

#define TESSERA_RELEASE_ASSERT(cond, reason)                                           \
  do {                                                                                 \
    if (!(cond)) ::tessera::internal::AssertFailed(__FILE__, __LINE__, #cond, reason); \
  } while (false)

#ifdef NDEBUG
#define TESSERA_ASSERT(cond, reason) \
  do {                               \
    (void)sizeof(!(cond));           \
  } while (false)
#else
#define TESSERA_ASSERT(cond, reason) TESSERA_RELEASE_ASSERT(cond, reason)
#endif
