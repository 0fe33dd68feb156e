// Pins the glibc functions the preload library calls to the symbol versions glibc 2.28 has, so
// that the library built against a newer glibc (Debian 12: 2.36) still loads with 2.28
// (docs/design/0020-deployment.md, "The preload library's floor"). Force-included into every
// object of the library (-include, tessera_preload_objects() in cmake/TesseraPreload.cmake).
//
// glibc 2.34 moved the libpthread and libdl functions into libc.so.6 under new versions
// (pthread_create@@GLIBC_2.34) and kept the old ones (pthread_create@GLIBC_2.2.5) as
// compatibility symbols: glibc's promise that binaries built against an older glibc keep running.
// A reference bound to the old version is such a binary's reference. On glibc < 2.34 the loader
// finds it in libpthread.so.0 / libdl.so.2, which the library therefore names as NEEDED (on
// newer glibc those are empty stubs). Each pin is the version the function had in glibc 2.28;
// for the condition variables that is 2.3.2 (the 2.2.5 ones are the old implementation).
//
// preload_floor_test (beside this file) checks the result: a function missing here whose default
// version is above the floor (deployments/images/preload-abi-floor) fails it.
#pragma once

#if !defined(__x86_64__)
#error "the preload library's glibc pins are written for x86-64 (base version GLIBC_2.2.5)"
#endif

// clang-format off
#define TESSERA_GLIBC_PINS(X)                      \
  X(dlopen, "GLIBC_2.2.5")                         \
  X(dlerror, "GLIBC_2.2.5")                        \
  X(dlvsym, "GLIBC_2.2.5")                         \
  X(dlclose, "GLIBC_2.2.5")                        \
  X(dladdr, "GLIBC_2.2.5")                         \
  X(pthread_create, "GLIBC_2.2.5")                 \
  X(pthread_join, "GLIBC_2.2.5")                   \
  X(pthread_detach, "GLIBC_2.2.5")                 \
  X(pthread_once, "GLIBC_2.2.5")                   \
  X(pthread_key_create, "GLIBC_2.2.5")             \
  X(pthread_getspecific, "GLIBC_2.2.5")            \
  X(pthread_setspecific, "GLIBC_2.2.5")            \
  X(pthread_mutex_trylock, "GLIBC_2.2.5")          \
  X(pthread_mutexattr_init, "GLIBC_2.2.5")         \
  X(pthread_mutexattr_destroy, "GLIBC_2.2.5")      \
  X(pthread_mutexattr_settype, "GLIBC_2.2.5")      \
  X(pthread_mutexattr_setpshared, "GLIBC_2.2.5")   \
  X(pthread_mutexattr_setrobust, "GLIBC_2.12")     \
  X(pthread_mutex_consistent, "GLIBC_2.12")        \
  X(pthread_condattr_setclock, "GLIBC_2.3.3")      \
  X(pthread_cond_init, "GLIBC_2.3.2")              \
  X(pthread_cond_destroy, "GLIBC_2.3.2")           \
  X(pthread_cond_signal, "GLIBC_2.3.2")            \
  X(pthread_cond_broadcast, "GLIBC_2.3.2")         \
  X(pthread_cond_wait, "GLIBC_2.3.2")              \
  X(pthread_cond_timedwait, "GLIBC_2.3.2")         \
  X(pthread_sigmask, "GLIBC_2.2.5")                \
  X(pthread_setname_np, "GLIBC_2.12")
// clang-format on

#define TESSERA_GLIBC_PIN(name, version) __asm__(".symver " #name "," #name "@" version);
TESSERA_GLIBC_PINS(TESSERA_GLIBC_PIN)
#undef TESSERA_GLIBC_PIN
