// The kernels `tessera doctor` runs, as PTX the driver compiles at load (cuModuleLoadData): no
// nvcc needed on the node, and the same text on every GPU generation since Volta.
#pragma once

namespace tessera::doctor {

inline constexpr char kKernelsPtx[] = R"PTX(
.version 7.0
.target sm_70
.address_size 64

// Every thread waits until the GPU's global timer has advanced by `ns` nanoseconds: a long
// kernel that holds every SM it is given.
.visible .entry tessera_spin(.param .u64 ns)
{
  .reg .u64 %d, %t0, %t, %end;
  .reg .pred %p;
  ld.param.u64 %d, [ns];
  mov.u64 %t0, %globaltimer;
  add.u64 %end, %t0, %d;
SPIN:
  mov.u64 %t, %globaltimer;
  setp.lt.u64 %p, %t, %end;
  @%p bra SPIN;
  ret;
}

// An empty kernel: the latency probe.
.visible .entry tessera_probe()
{
  ret;
}

// A store to an address no allocation holds: CUDA_ERROR_ILLEGAL_ADDRESS for its context.
.visible .entry tessera_fault()
{
  .reg .u64 %a;
  .reg .u32 %v;
  mov.u64 %a, 16;
  mov.u32 %v, 1;
  st.global.u32 [%a], %v;
  ret;
}

// A compute-bound loop of `iters` dependent FMAs per thread; the result is stored only when
// `out` is not null, which the compiler cannot know, so the loop is kept.
.visible .entry tessera_burn(.param .u64 out, .param .u32 iters)
{
  .reg .f32 %x, %y;
  .reg .u32 %i, %n;
  .reg .u64 %a;
  .reg .pred %p;
  ld.param.u32 %n, [iters];
  mov.f32 %x, 0f3F800000;
  mov.f32 %y, 0f3F000001;
  mov.u32 %i, 0;
BURN:
  fma.rn.f32 %x, %x, %y, %y;
  add.u32 %i, %i, 1;
  setp.lt.u32 %p, %i, %n;
  @%p bra BURN;
  ld.param.u64 %a, [out];
  setp.eq.u64 %p, %a, 0;
  @%p bra DONE;
  st.global.f32 [%a], %x;
DONE:
  ret;
}
)PTX";

}  // namespace tessera::doctor
