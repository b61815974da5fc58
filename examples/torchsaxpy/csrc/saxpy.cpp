// torchsaxpy::saxpy(Tensor x, Tensor y, float a) -> Tensor: the operator's schema, its CPU
// kernel, and the empty Python module whose import registers them.
#include <Python.h>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

extern "C" {
// Importing torchsaxpy._C loads this library, which runs the registrations below.
PyObject *PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
}

namespace torchsaxpy {

at::Tensor saxpy_cpu(const at::Tensor &x, const at::Tensor &y, double a) {
  TORCH_CHECK(x.sizes() == y.sizes(), "x and y differ in shape: ", x.sizes(), " vs ", y.sizes());
  TORCH_CHECK(x.dtype() == at::kFloat && y.dtype() == at::kFloat, "x and y must be float32");
  TORCH_INTERNAL_ASSERT(x.device().type() == at::DeviceType::CPU);
  TORCH_INTERNAL_ASSERT(y.device().type() == at::DeviceType::CPU);
  const at::Tensor xc = x.contiguous(), yc = y.contiguous();
  at::Tensor out = at::empty(xc.sizes(), xc.options());
  const float *xp = xc.data_ptr<float>();
  const float *yp = yc.data_ptr<float>();
  float *op = out.data_ptr<float>();
  const float af = static_cast<float>(a);
  for (int64_t i = 0; i < out.numel(); ++i) op[i] = af * xp[i] + yp[i];
  return out;
}

TORCH_LIBRARY(torchsaxpy, m) { m.def("saxpy(Tensor x, Tensor y, float a) -> Tensor"); }

TORCH_LIBRARY_IMPL(torchsaxpy, CPU, m) { m.impl("saxpy", &saxpy_cpu); }

}  // namespace torchsaxpy
