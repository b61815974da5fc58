// CUDA kernels behind lazysaxpy.h. Every CUDA error is returned, never printed.
#include <cuda_runtime.h>

#include <cstdio>

#include "lazysaxpy.h"

namespace {

__global__ void saxpy_kernel(float a, const float *__restrict__ x, const float *__restrict__ y,
                             float *__restrict__ out, size_t n) {
  const size_t stride = static_cast<size_t>(blockDim.x) * gridDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = a * x[i] + y[i];
  }
}

}  // namespace

extern "C" {

const char *lazysaxpy_backend(void) { return "cuda"; }

int lazysaxpy_runtime_version(int *version) {
  return static_cast<int>(cudaRuntimeGetVersion(version));
}

int lazysaxpy_device(char *name, size_t name_len, int *cc_major, int *cc_minor) {
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  cudaDeviceProp prop;
  if (err == cudaSuccess) err = cudaGetDeviceProperties(&prop, dev);
  if (err != cudaSuccess) return static_cast<int>(err);
  if (name != nullptr && name_len > 0) std::snprintf(name, name_len, "%s", prop.name);
  if (cc_major != nullptr) *cc_major = prop.major;
  if (cc_minor != nullptr) *cc_minor = prop.minor;
  return 0;
}

int lazysaxpy_saxpy(float a, const float *x, const float *y, float *out, size_t n) {
  if (n == 0) return 0;
  if (x == nullptr || y == nullptr || out == nullptr) return static_cast<int>(cudaErrorInvalidValue);
  const size_t bytes = n * sizeof(float);
  float *dx = nullptr, *dy = nullptr, *dout = nullptr;
  const unsigned threads = 256;
  const size_t want = (n + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(want < 4096 ? want : 4096);
  cudaError_t err = cudaMalloc(&dx, bytes);
  if (err == cudaSuccess) err = cudaMalloc(&dy, bytes);
  if (err == cudaSuccess) err = cudaMalloc(&dout, bytes);
  if (err == cudaSuccess) err = cudaMemcpy(dx, x, bytes, cudaMemcpyHostToDevice);
  if (err == cudaSuccess) err = cudaMemcpy(dy, y, bytes, cudaMemcpyHostToDevice);
  if (err == cudaSuccess) {
    saxpy_kernel<<<blocks, threads>>>(a, dx, dy, dout, n);
    err = cudaGetLastError();  // launch errors: "no kernel image is available for execution"
  }
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  if (err == cudaSuccess) err = cudaMemcpy(out, dout, bytes, cudaMemcpyDeviceToHost);
  for (float *p : {dx, dy, dout}) {
    const cudaError_t freed = p != nullptr ? cudaFree(p) : cudaSuccess;
    if (err == cudaSuccess) err = freed;
  }
  return static_cast<int>(err);
}

const char *lazysaxpy_error_string(int code) {
  static thread_local char text[256];
  const cudaError_t err = static_cast<cudaError_t>(code);
  std::snprintf(text, sizeof text, "%s: %s", cudaGetErrorName(err), cudaGetErrorString(err));
  return text;
}

}  // extern "C"
