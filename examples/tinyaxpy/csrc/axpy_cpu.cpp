// CPU implementation of tinyaxpy.h: the same API with no CUDA anywhere.
#include <cstdio>

#include "tinyaxpy.h"

extern "C" {

const char *tinyaxpy_backend(void) { return "cpu"; }

int tinyaxpy_runtime_version(int *version) {
  if (version != nullptr) *version = 0;
  return 0;
}

int tinyaxpy_device_query(char *name, size_t name_len, int *cc_major, int *cc_minor) {
  if (name != nullptr && name_len > 0) std::snprintf(name, name_len, "%s", "host CPU");
  if (cc_major != nullptr) *cc_major = 0;
  if (cc_minor != nullptr) *cc_minor = 0;
  return 0;
}

int tinyaxpy_saxpy(float a, const float *x, const float *y, float *out, size_t n) {
  if (n == 0) return 0;
  if (x == nullptr || y == nullptr || out == nullptr) return 1;
  for (size_t i = 0; i < n; ++i) out[i] = a * x[i] + y[i];
  return 0;
}

const char *tinyaxpy_error_name(int code) { return code == 0 ? "success" : "invalid_argument"; }

const char *tinyaxpy_error_string(int code) {
  return code == 0 ? "no error" : "invalid argument (null pointer)";
}

}  // extern "C"
