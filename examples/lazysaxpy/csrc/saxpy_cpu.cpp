// CPU kernels behind lazysaxpy.h: the build when no CUDA compiler is found.
#include <cstdio>
#include <cstring>

#include "lazysaxpy.h"

extern "C" {

const char *lazysaxpy_backend(void) { return "cpu"; }

int lazysaxpy_runtime_version(int *version) {
  if (version != nullptr) *version = 0;
  return 0;
}

int lazysaxpy_device(char *name, size_t name_len, int *cc_major, int *cc_minor) {
  if (name != nullptr && name_len > 0) std::snprintf(name, name_len, "%s", "cpu");
  if (cc_major != nullptr) *cc_major = 0;
  if (cc_minor != nullptr) *cc_minor = 0;
  return 0;
}

int lazysaxpy_saxpy(float a, const float *x, const float *y, float *out, size_t n) {
  if (n == 0) return 0;
  if (x == nullptr || y == nullptr || out == nullptr) return 1;
  for (size_t i = 0; i < n; ++i) out[i] = a * x[i] + y[i];
  return 0;
}

const char *lazysaxpy_error_string(int code) {
  return code == 0 ? "success" : code == 1 ? "invalid argument: a null pointer" : "unknown error";
}

}  // extern "C"
