// Prints what the constructor of ctor_cuda_lib managed to allocate before main().
#include <cstdio>

extern "C" unsigned long long g_ctor_allocated;
extern "C" int g_ctor_result;

int main() {
  std::printf("ctor_allocated=%llu ctor_result=%d\n", g_ctor_allocated, g_ctor_result);
  return 0;
}
