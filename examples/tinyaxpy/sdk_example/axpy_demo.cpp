// A C++ program outside the wheel that uses tinyaxpy's SDK. Build it with
//   eval "$(python -m tinyaxpy --sdk | python -c 'import json,sys; d=json.load(sys.stdin);
//           print(f"I={d[\"include_dir\"]} L={d[\"lib_dir\"]}")')"
//   g++ -std=c++17 axpy_demo.cpp -I"$I" -L"$L" -ltinyaxpy_kernels -Wl,-rpath,"$L" -o axpy_demo
// `axpy_demo --info` needs no GPU (link and load check); `axpy_demo` runs a*x+y on the backend.
// Exit status: 0 ok, 2 backend error (message on stderr), 3 wrong result.
#include <tinyaxpy.h>

#include <cstdio>
#include <cstring>
#include <vector>

int main(int argc, char **argv) {
  int runtime = 0;
  int code = tinyaxpy_runtime_version(&runtime);
  std::printf("backend=%s runtime=%d api=%d\n", tinyaxpy_backend(), runtime, TINYAXPY_API_VERSION);
  if (code != 0) {
    std::fprintf(stderr, "tinyaxpy_runtime_version: %s\n", tinyaxpy_error_string(code));
    return 2;
  }
  if (argc > 1 && std::strcmp(argv[1], "--info") == 0) return 0;
  const size_t n = 1000;
  std::vector<float> x(n), y(n), out(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i);
    y[i] = 1.0f;
  }
  code = tinyaxpy_saxpy(3.0f, x.data(), y.data(), out.data(), n);
  if (code != 0) {
    std::fprintf(stderr, "tinyaxpy_saxpy: %s: %s\n", tinyaxpy_error_name(code),
                 tinyaxpy_error_string(code));
    return 2;
  }
  for (size_t i = 0; i < n; ++i) {
    if (out[i] != 3.0f * static_cast<float>(i) + 1.0f) {
      std::fprintf(stderr, "wrong result at %zu: %f\n", i, out[i]);
      return 3;
    }
  }
  std::printf("ok: out[999]=%.1f\n", out[n - 1]);
  return 0;
}
