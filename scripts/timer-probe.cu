// An arbiter for the timing benchmark (scripts/bench-timing.sh): the copy_f32 seed's kernel, with
// each block stamping the GPU's global timer (%globaltimer, ns) when it starts and when it has
// stored its last element. The earliest start and the latest end over the blocks bound the time
// the kernel's blocks actually ran, independently of CUPTI and of ncu: a timer that reads well
// above this span counts launch or drain work outside the kernel's blocks. Same protocol as
// kharness: L2 written then read through (2x its size) before every iteration.
//
//   nvcc -O3 -arch=sm_90 scripts/timer-probe.cu -o timer-probe && ./timer-probe [ITERATIONS]
// prints the timer's step (PROBE_RESOLUTION ns=STEP), then per copy size:
// PROBE n=N span_us=MEDIAN events_us=MEDIAN samples=K
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

__device__ __forceinline__ unsigned long long global_timer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// copy_vec4 of operators/copy_f32/seed.cu, plus the two stamps per block.
__global__ void copy_vec4_stamped(const float* __restrict__ x, float* __restrict__ y, long long n,
                                  unsigned long long* stamps) {
  __shared__ unsigned long long start;
  if (threadIdx.x == 0) start = global_timer();
  const long long vectors = n / 4;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  const float4* xv = reinterpret_cast<const float4*>(x);
  float4* yv = reinterpret_cast<float4*>(y);
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < vectors;
       i += stride)
    yv[i] = xv[i];
  for (long long i = vectors * 4 + static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride)
    y[i] = x[i];
  __threadfence();  // the block's stores completed, not only issued, before its end stamp
  __syncthreads();
  if (threadIdx.x == 0) {
    atomicMin(&stamps[0], start);
    atomicMax(&stamps[1], global_timer());
  }
}

// The timer's granularity: one thread reads %globaltimer back to back and keeps the smallest
// non-zero step (on some GPUs it advances in 1 us steps, on others in tens of ns).
__global__ void timer_step(unsigned long long* out) {
  unsigned long long smallest = ~0ull, last = global_timer();
  for (int i = 0; i < 100000; ++i) {
    const unsigned long long now = global_timer();
    if (now != last && now - last < smallest) smallest = now - last;
    last = now;
  }
  *out = smallest;
}

// Reads every word (the result is kept only so the loads are not removed).
__global__ void read_through(const unsigned* __restrict__ p, long long words, unsigned* sink) {
  unsigned acc = 0;
  for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < words;
       i += static_cast<long long>(gridDim.x) * blockDim.x)
    acc ^= p[i];
  if (acc == 0x9e3779b9u) *sink = acc;
}

#define CHECK(call)                                                                       \
  do {                                                                                    \
    cudaError_t e_ = (call);                                                              \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "timer-probe: %s: %s\n", #call, cudaGetErrorString(e_));       \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 50;
  if (iterations < 1) {
    std::fprintf(stderr, "timer-probe: ITERATIONS must be a positive number\n");
    return 2;
  }
  int device = 0, l2 = 0, sms = 0;
  CHECK(cudaGetDevice(&device));
  CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const long long sizes[] = {1024, 1048576, 10000000, 100000000, 1000000000};
  const long long largest = sizes[4];
  float *x = nullptr, *y = nullptr;
  unsigned *flush = nullptr, *sink = nullptr;
  unsigned long long* stamps = nullptr;
  const std::size_t flush_bytes = 2 * static_cast<std::size_t>(l2 > 0 ? l2 : (64 << 20));
  CHECK(cudaMalloc(&x, largest * sizeof(float)));
  CHECK(cudaMalloc(&y, largest * sizeof(float)));
  CHECK(cudaMalloc(&flush, flush_bytes));
  CHECK(cudaMalloc(&sink, sizeof(unsigned)));
  CHECK(cudaMalloc(&stamps, 2 * sizeof(unsigned long long)));
  CHECK(cudaMemset(x, 0x3c, largest * sizeof(float)));
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  timer_step<<<1, 1, 0, s>>>(stamps);
  unsigned long long step = 0;
  CHECK(cudaMemcpyAsync(&step, stamps, sizeof step, cudaMemcpyDeviceToHost, s));
  CHECK(cudaStreamSynchronize(s));
  CHECK(cudaGetLastError());
  std::printf("PROBE_RESOLUTION ns=%llu\n", step);
  const unsigned long long init[2] = {~0ull, 0ull};
  for (long long n : sizes) {
    const long long blocks = std::min<long long>((n + 1023) / 1024, 132LL * 16);
    std::vector<double> span, events;
    for (int it = -3; it < iterations; ++it) {  // three warm-up iterations
      CHECK(cudaMemsetAsync(flush, it & 0xff, flush_bytes, s));
      read_through<<<sms * 4, 512, 0, s>>>(flush, static_cast<long long>(flush_bytes / 4), sink);
      CHECK(cudaMemcpyAsync(stamps, init, sizeof init, cudaMemcpyHostToDevice, s));
      CHECK(cudaEventRecord(e0, s));
      copy_vec4_stamped<<<static_cast<unsigned>(blocks), 256, 0, s>>>(x, y, n, stamps);
      CHECK(cudaEventRecord(e1, s));
      unsigned long long got[2];
      CHECK(cudaMemcpyAsync(got, stamps, sizeof got, cudaMemcpyDeviceToHost, s));
      CHECK(cudaStreamSynchronize(s));
      CHECK(cudaGetLastError());
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, e0, e1));
      if (it < 0) continue;
      span.push_back(static_cast<double>(got[1] - got[0]) * 1e-3);
      events.push_back(ms * 1e3);
    }
    std::printf("PROBE n=%lld span_us=%.3f events_us=%.3f samples=%d\n", n, median(span),
                median(events), iterations);
    std::fflush(stdout);
  }
  return 0;
}
