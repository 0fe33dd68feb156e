// The few pieces of the C++ runtime the preload library uses, so that it links neither
// libstdc++ nor libgcc_s (docs/design/0020-deployment.md, "The preload library's floor"): it is
// injected into containers whose C++ runtime may be older than ours, or absent.
//
// Only the library itself links this file (never the unit tests, which keep libstdc++), and its
// version script keeps every symbol here local: the process's own operator new, fstat, ... are
// untouched. The library is built without exceptions, so what libstdc++ would throw ends the
// process with a message, as an uncaught exception would. A use of another runtime function is
// an undefined reference at link time (-Wl,--no-undefined): avoid it, or add it here.
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <new>
#include <pthread.h>
#include <string>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <unordered_map>
#include <utility>

namespace {

[[noreturn]] void Die(const char* what) {
  constexpr char kPrefix[] = "libtessera-cuda: fatal: ";
  (void)!write(STDERR_FILENO, kPrefix, sizeof(kPrefix) - 1);
  (void)!write(STDERR_FILENO, what, std::strlen(what));
  (void)!write(STDERR_FILENO, "\n", 1);
  std::abort();
}

void* Allocate(std::size_t n) {
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) Die("out of memory");
  return p;
}

// Bucket counts for the unordered containers: primes, each about twice the last, so that keys
// with a common stride (aligned pointers hash to themselves) spread over the buckets.
constexpr std::size_t kPrimes[] = {
    5ULL,         11ULL,        23ULL,        53ULL,        97ULL,         193ULL,
    389ULL,       769ULL,       1543ULL,      3079ULL,      6151ULL,       12289ULL,
    24593ULL,     49157ULL,     98317ULL,     196613ULL,    393241ULL,     786433ULL,
    1572869ULL,   3145739ULL,   6291469ULL,   12582917ULL,  25165843ULL,   50331653ULL,
    100663319ULL, 201326611ULL, 402653189ULL, 805306457ULL, 1610612741ULL, 3221225473ULL,
    4294967291ULL};

std::size_t BucketsAtLeast(std::size_t n) {
  for (std::size_t p : kPrimes) {
    if (p >= n) return p;
  }
  return n | 1;  // beyond the table: odd still spreads power-of-two strides
}

// The Itanium C++ ABI's guard for function-local statics: byte 0 set once initialized (the
// compiler's inline fast path reads it), byte 1 set while one thread runs the initializer.
pthread_mutex_t guard_mutex = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t guard_done = PTHREAD_COND_INITIALIZER;

}  // namespace

void* operator new(std::size_t n) { return Allocate(n); }
void* operator new[](std::size_t n) { return Allocate(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t /*size*/) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t /*size*/) noexcept { std::free(p); }

namespace std {

void __throw_bad_alloc() { Die("std::bad_alloc"); }
void __throw_bad_array_new_length() { Die("std::bad_array_new_length"); }
void __throw_bad_function_call() { Die("std::bad_function_call"); }
void __throw_logic_error(const char* what) { Die(what); }
void __throw_length_error(const char* what) { Die(what); }
void __throw_invalid_argument(const char* what) { Die(what); }
void __throw_out_of_range(const char* what) { Die(what); }
void __throw_out_of_range_fmt(const char* format, ...) { Die(format); }
void __throw_system_error(int error) { Die(std::strerror(error)); }

chrono::steady_clock::time_point chrono::steady_clock::now() noexcept {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return time_point(chrono::seconds(t.tv_sec) + chrono::nanoseconds(t.tv_nsec));
}

namespace __detail {

// libstdc++'s rehash policy, as its header declares it: grow to at least twice the buckets
// once the elements would exceed max_load_factor per bucket.
std::size_t _Prime_rehash_policy::_M_next_bkt(std::size_t n) const {
  const std::size_t buckets = BucketsAtLeast(n);
  _M_next_resize = static_cast<std::size_t>(static_cast<double>(buckets) * _M_max_load_factor);
  return buckets;
}

std::pair<bool, std::size_t> _Prime_rehash_policy::_M_need_rehash(std::size_t n_bkt,
                                                                  std::size_t n_elt,
                                                                  std::size_t n_ins) const {
  if (n_elt + n_ins <= _M_next_resize) return {false, 0};
  const double min_buckets = static_cast<double>(n_elt + n_ins) / _M_max_load_factor;
  if (min_buckets >= static_cast<double>(n_bkt)) {
    const std::size_t want = static_cast<std::size_t>(min_buckets) + 1;
    return {true, _M_next_bkt(want > n_bkt * _S_growth_factor ? want : n_bkt * _S_growth_factor)};
  }
  _M_next_resize = static_cast<std::size_t>(static_cast<double>(n_bkt) * _M_max_load_factor);
  return {false, 0};
}

}  // namespace __detail

// std::string's members, all of them (libstdc++ instantiates them in its own library, which this
// one does not link, and its headers say so with an extern template): which members a compiler
// leaves out of line changes with its version (GCC 13 moved part of replace() into
// _M_replace_cold, which GCC 12 inlined).
template class basic_string<char>;

}  // namespace std

extern "C" {

int __cxa_guard_acquire(std::uint64_t* guard) {
  auto* bytes = reinterpret_cast<unsigned char*>(guard);
  if (__atomic_load_n(&bytes[0], __ATOMIC_ACQUIRE) != 0) return 0;
  pthread_mutex_lock(&guard_mutex);
  while (bytes[1] != 0) pthread_cond_wait(&guard_done, &guard_mutex);
  const bool initialized = __atomic_load_n(&bytes[0], __ATOMIC_RELAXED) != 0;
  if (!initialized) bytes[1] = 1;
  pthread_mutex_unlock(&guard_mutex);
  return initialized ? 0 : 1;
}

void __cxa_guard_release(std::uint64_t* guard) {
  auto* bytes = reinterpret_cast<unsigned char*>(guard);
  pthread_mutex_lock(&guard_mutex);
  __atomic_store_n(&bytes[0], 1, __ATOMIC_RELEASE);
  bytes[1] = 0;
  pthread_cond_broadcast(&guard_done);
  pthread_mutex_unlock(&guard_mutex);
}

void __cxa_guard_abort(std::uint64_t* guard) {
  auto* bytes = reinterpret_cast<unsigned char*>(guard);
  pthread_mutex_lock(&guard_mutex);
  bytes[1] = 0;
  pthread_cond_broadcast(&guard_done);
  pthread_mutex_unlock(&guard_mutex);
}

// glibc 2.33 made fstat and lstat functions of their own (before, <sys/stat.h> inlined calls to
// __fxstat/__lxstat); these local definitions make the same system calls, so the library's
// references never reach GLIBC_2.33.
int fstat(int fd, struct stat* buf) noexcept {
  return static_cast<int>(syscall(SYS_fstat, fd, buf));
}

int lstat(const char* path, struct stat* buf) noexcept {
  return static_cast<int>(syscall(SYS_newfstatat, AT_FDCWD, path, buf, AT_SYMLINK_NOFOLLOW));
}

}  // extern "C"
