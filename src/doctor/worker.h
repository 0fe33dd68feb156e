// The processes `tessera doctor` starts: one tenant each, driving the CUDA driver directly
// (dlopen of libcuda.so.1, kernels from kernels.h). `tessera doctor-worker ROLE ARGS...`; each
// prints `key=value` lines on stdout and takes commands, one per line, on stdin:
//
//   info                     name= uuid= total= sms= cuda=
//   hold BYTES               ready=1, then: `grow BYTES` -> grow=RESULT, `alive` -> alive=RESULT
//   hog CHUNK                takes CHUNK after CHUNK until refused: hogged=BYTES ready=1
//   fill BYTES               writes the pattern byte over BYTES: ready=1 (then waits)
//   scan BYTES               allocates up to BYTES, reads it back: matches=WORDS scanned=BYTES
//   probe COUNT              empty kernel + synchronize COUNT times: p50_us= p99_us=
//   spin                     long kernels on every SM until stdin closes: ready=1
//   fault                    an illegal-address kernel: fault=RESULT
//   burn MILLISECONDS        compute-bound kernels for that long: rate=KERNELS_PER_SECOND
//   quota                    what the process is told: total= free= device_total=
//   scrub BYTES              cost of zeroing: ms_per_gib=
//
// RESULT is the CUresult (0 = success). Every worker ends when stdin closes, and by itself after
// a deadline, so nothing outlives the experiment.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace tessera::doctor {

// The byte `fill` writes; `scan` counts 32-bit words made of it.
inline constexpr std::uint8_t kPatternByte = 0xA5;

// Words of `bytes` (whole 32-bit words only) whose four bytes all equal `byte`.
std::uint64_t CountPatternWords(const std::uint8_t* data, std::size_t bytes, std::uint8_t byte);

// Runs one role (args[0]); returns the process exit code. Errors go to `out` as error=TEXT.
int RunWorker(const std::vector<std::string>& args, std::istream& in, std::ostream& out);

}  // namespace tessera::doctor
