// Part-2 paths on the real GPU, through the CUDA runtime:
//   arrays MIB        cudaMallocArray of MIB each (float4, 2D) until refused, hold
//   graphs MIB        stream-captured graphs, each allocating MIB (cudaMallocAsync + free
//                     inside the graph: memory nodes), instantiated and launched until refused
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>
#include <vector>

#include <cuda_runtime.h>

__global__ void Touch(char* p, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    p[i] = 1;
}

static void Hold(const char* what, size_t count, size_t bytes, int last) {
  size_t free_b = 0, total = 0;
  cudaMemGetInfo(&free_b, &total);
  std::printf(
      "{\"what\":\"%s\",\"count\":%zu,\"allocated\":%zu,\"last_error\":%d,\"free\":%zu,\"total\":%"
      "zu,\"pid\":%d}\n",
      what, count, bytes, last, free_b, total, getpid());
  std::printf("HOLDING\n");
  std::fflush(stdout);
  char line[16];
  while (std::fgets(line, sizeof(line), stdin) != nullptr) {
  }
}

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const std::string mode = argv[1];
  const size_t mib = std::strtoull(argv[2], nullptr, 10);
  cudaFree(nullptr);
  if (mode == "arrays") {
    const size_t side = 1024;  // float4: 16 B per element; height = MIB MiB / (1024 * 16 B)
    const size_t height = (mib << 20) / (side * 16);
    cudaChannelFormatDesc desc = cudaCreateChannelDesc<float4>();
    std::vector<cudaArray_t> arrays;
    cudaError_t e = cudaSuccess;
    for (;;) {
      cudaArray_t a = nullptr;
      if ((e = cudaMallocArray(&a, &desc, side, height)) != cudaSuccess) break;
      arrays.push_back(a);
    }
    cudaGetLastError();
    Hold("arrays", arrays.size(), arrays.size() * (mib << 20), e);
    return 0;
  }
  if (mode == "graphs") {
    const size_t bytes = mib << 20;
    cudaStream_t s;
    cudaStreamCreate(&s);
    std::vector<cudaGraphExec_t> execs;
    cudaError_t e = cudaSuccess;
    for (int i = 0; i < 64; ++i) {
      cudaGraph_t g;
      char* p = nullptr;
      cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
      cudaMallocAsync(reinterpret_cast<void**>(&p), bytes, s);
      Touch<<<132, 256, 0, s>>>(p, bytes);
      cudaFreeAsync(p, s);
      cudaStreamEndCapture(s, &g);
      cudaError_t captured = cudaGetLastError();
      cudaGraphExec_t exec;
      if ((e = cudaGraphInstantiate(&exec, g, 0)) != cudaSuccess) {
        std::fprintf(stderr, "graph %d: capture %s, instantiate %s\n", i,
                     cudaGetErrorString(captured), cudaGetErrorString(e));
        break;
      }
      if ((e = cudaGraphLaunch(exec, s)) != cudaSuccess) {
        std::fprintf(stderr, "graph %d: launch %s\n", i, cudaGetErrorString(e));
        break;
      }
      execs.push_back(exec);
    }
    cudaStreamSynchronize(s);
    cudaGetLastError();
    Hold("graphs", execs.size(), execs.size() * bytes, e);
    return 0;
  }
  return 2;
}
