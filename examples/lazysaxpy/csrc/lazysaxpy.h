// The C ABI of liblazysaxpy_kernels.so. Every function that can fail returns 0 on success
// or an error code that lazysaxpy_error_string() explains (a cudaError_t in CUDA builds).
#ifndef LAZYSAXPY_H
#define LAZYSAXPY_H

#include <stddef.h>

#define LAZYSAXPY_API __attribute__((visibility("default")))

#ifdef __cplusplus
extern "C" {
#endif

// "cuda" or "cpu": which kernels this library was built with.
LAZYSAXPY_API const char *lazysaxpy_backend(void);

// The CUDA runtime's version (13000 for 13.0); 0 in CPU builds.
LAZYSAXPY_API int lazysaxpy_runtime_version(int *version);

// Name and compute capability of the current device; "cpu", 0, 0 in CPU builds.
LAZYSAXPY_API int lazysaxpy_device(char *name, size_t name_len, int *cc_major, int *cc_minor);

// out[i] = a * x[i] + y[i] for i < n, in float32. Host pointers.
LAZYSAXPY_API int lazysaxpy_saxpy(float a, const float *x, const float *y, float *out, size_t n);

// "cudaErrorNoDevice: no CUDA-capable device is detected", or "success".
LAZYSAXPY_API const char *lazysaxpy_error_string(int code);

#ifdef __cplusplus
}
#endif

#endif  // LAZYSAXPY_H
