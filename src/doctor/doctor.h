// `tessera doctor`: short, bounded experiments on one GPU that measure what each sharing mode
// really isolates (docs/design/0015-doctor.md). Each experiment starts tenants as worker
// processes (worker.h) in the mode under test — plainly (native), under `tessera run` (shared),
// or as clients of a private MPS control daemon under `tessera run` (mps) — and kills whatever
// is left when it ends. Dependency-free: the GPU host builds it.
#pragma once

#include <chrono>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/status.h"

#include "doctor/report.h"

namespace tessera::doctor {

struct DoctorOptions {
  std::string self;  // this tessera binary: `doctor-worker` and `run` subcommands
  std::string gpu;   // CUDA index or GPU UUID; empty: device 0
  std::vector<SharingMode> modes = {SharingMode::kNative, SharingMode::kShared, SharingMode::kMps};
  std::string mps_control = "nvidia-cuda-mps-control";  // looked up in PATH unless a path
  std::string nvidia_smi = "nvidia-smi";
  std::chrono::milliseconds experiment_limit{10000};  // each experiment, start to cleanup
  std::string date;                                   // for the report (YYYY-MM-DD)
  bool keep = false;  // keep the work folder (tenants' stderr, MPS logs) and say where
};

// "native,shared,mps" (any subset, each once). The modes doctor can measure; the others of the
// contracts record (exclusive, mig) are refused with the accepted list.
StatusOr<std::vector<SharingMode>> ParseDoctorModes(std::string_view text);

// Runs every experiment in every mode; progress lines go to `progress`. Fails only when the GPU
// cannot be reached at all; an experiment that cannot run becomes a "not measured" finding.
StatusOr<Report> RunDoctor(const DoctorOptions& options, std::ostream& progress);

}  // namespace tessera::doctor
