"""CUDA C source shared by the GPU scripts that time a kernel on the SMs (%globaltimer).

`scale(x, n, span)`: one elementwise step on n floats; unless span is null, span[0] takes the
earliest start of its blocks (atomicMin: set it to all ones first) and span[1] the latest end
(atomicMax: set it to 0 first), in GPU-global nanoseconds.
"""
SOURCE = r"""
__device__ unsigned long long now() {
  unsigned long long t; asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t)); return t;
}
extern "C" __global__ void scale(float* x, int n, unsigned long long* span) {
  unsigned long long t0 = now();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * 1.0001f + 1e-4f;
  __syncthreads();
  if (threadIdx.x == 0 && span != 0) { atomicMin(&span[0], t0); atomicMax(&span[1], now()); }
}
"""
