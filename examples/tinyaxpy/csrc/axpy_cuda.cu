// CUDA implementation of tinyaxpy.h. Every CUDA call's error is returned.
#include <cuda_runtime.h>

#include <cstdio>

#include "tinyaxpy.h"

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

const char *tinyaxpy_backend(void) { return "cuda"; }

int tinyaxpy_runtime_version(int *version) {
  return static_cast<int>(cudaRuntimeGetVersion(version));
}

int tinyaxpy_device_query(char *name, size_t name_len, int *cc_major, int *cc_minor) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) return static_cast<int>(err);
  if (count == 0) return static_cast<int>(cudaErrorNoDevice);
  int dev = 0;
  if ((err = cudaGetDevice(&dev)) != cudaSuccess) return static_cast<int>(err);
  cudaDeviceProp prop;
  if ((err = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess) return static_cast<int>(err);
  if (name != nullptr && name_len > 0) std::snprintf(name, name_len, "%s", prop.name);
  if (cc_major != nullptr) *cc_major = prop.major;
  if (cc_minor != nullptr) *cc_minor = prop.minor;
  return 0;
}

int tinyaxpy_saxpy(float a, const float *x, const float *y, float *out, size_t n) {
  if (n == 0) return 0;
  if (x == nullptr || y == nullptr || out == nullptr) return static_cast<int>(cudaErrorInvalidValue);
  const size_t bytes = n * sizeof(float);
  float *dx = nullptr, *dy = nullptr, *dout = nullptr;
  const unsigned threads = 256;
  const size_t want_blocks = (n + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(want_blocks < 65535 ? want_blocks : 65535);
  cudaError_t err = cudaMalloc(&dx, bytes);
  if (err == cudaSuccess) err = cudaMalloc(&dy, bytes);
  if (err == cudaSuccess) err = cudaMalloc(&dout, bytes);
  if (err == cudaSuccess) err = cudaMemcpy(dx, x, bytes, cudaMemcpyHostToDevice);
  if (err == cudaSuccess) err = cudaMemcpy(dy, y, bytes, cudaMemcpyHostToDevice);
  if (err == cudaSuccess) {
    saxpy_kernel<<<blocks, threads>>>(a, dx, dy, dout, n);
    err = cudaGetLastError();  // launch errors, e.g. "no kernel image is available"
  }
  if (err == cudaSuccess) err = cudaDeviceSynchronize();  // errors while running
  if (err == cudaSuccess) err = cudaMemcpy(out, dout, bytes, cudaMemcpyDeviceToHost);
  // Free what was allocated; report the first error, else a failure to free.
  const cudaError_t frees[3] = {dx ? cudaFree(dx) : cudaSuccess, dy ? cudaFree(dy) : cudaSuccess,
                                dout ? cudaFree(dout) : cudaSuccess};
  for (cudaError_t f : frees) {
    if (err == cudaSuccess) err = f;
  }
  return static_cast<int>(err);
}

const char *tinyaxpy_error_name(int code) { return cudaGetErrorName(static_cast<cudaError_t>(code)); }

const char *tinyaxpy_error_string(int code) {
  return cudaGetErrorString(static_cast<cudaError_t>(code));
}

}  // extern "C"
