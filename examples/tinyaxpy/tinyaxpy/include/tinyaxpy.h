/* tinyaxpy C/C++ SDK: out = a * x + y in float32, on the GPU (CUDA builds)
 * or the CPU (cpu builds). Link with -ltinyaxpy_kernels; tinyaxpy.sdk_paths()
 * in Python gives the include and library folders of an installed wheel.
 *
 * Every function that touches the device returns 0 on success or a backend
 * error code (the cudaError_t value on CUDA builds); tinyaxpy_error_name() and
 * tinyaxpy_error_string() describe it (cudaGetErrorName/cudaGetErrorString). */
#ifndef TINYAXPY_H
#define TINYAXPY_H

#include <stddef.h>

#define TINYAXPY_API_VERSION 1
#define TINYAXPY_API __attribute__((visibility("default")))

#ifdef __cplusplus
extern "C" {
#endif

/* "cuda" or "cpu"; makes no device call. */
TINYAXPY_API const char *tinyaxpy_backend(void);

/* The CUDA runtime version linked (e.g. 13000), 0 on cpu builds. No device needed. */
TINYAXPY_API int tinyaxpy_runtime_version(int *version);

/* Name and compute capability of the current device ("host CPU", 0.0 on cpu builds). */
TINYAXPY_API int tinyaxpy_device_query(char *name, size_t name_len, int *cc_major, int *cc_minor);

/* out[i] = a * x[i] + y[i] for i < n. Host pointers; out may alias y. */
TINYAXPY_API int tinyaxpy_saxpy(float a, const float *x, const float *y, float *out, size_t n);

TINYAXPY_API const char *tinyaxpy_error_name(int code);
TINYAXPY_API const char *tinyaxpy_error_string(int code);

#ifdef __cplusplus
}
#endif

#endif /* TINYAXPY_H */
