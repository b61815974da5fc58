// The CUDA kernel of torchsaxpy::saxpy, registered for CUDA tensors.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

namespace torchsaxpy {

__global__ void saxpy_kernel(int64_t n, float a, const float *__restrict__ x,
                             const float *__restrict__ y, float *__restrict__ out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a * x[i] + y[i];
}

at::Tensor saxpy_cuda(const at::Tensor &x, const at::Tensor &y, double a) {
  TORCH_CHECK(x.sizes() == y.sizes(), "x and y differ in shape: ", x.sizes(), " vs ", y.sizes());
  TORCH_CHECK(x.dtype() == at::kFloat && y.dtype() == at::kFloat, "x and y must be float32");
  TORCH_INTERNAL_ASSERT(x.device().type() == at::DeviceType::CUDA);
  TORCH_INTERNAL_ASSERT(y.device().type() == at::DeviceType::CUDA);
  const at::Tensor xc = x.contiguous(), yc = y.contiguous();
  at::Tensor out = at::empty(xc.sizes(), xc.options());
  const int64_t n = out.numel();
  if (n == 0) return out;
  const int threads = 256;
  const int64_t blocks = (n + threads - 1) / threads;
  saxpy_kernel<<<static_cast<unsigned>(blocks), threads, 0, c10::cuda::getCurrentCUDAStream()>>>(
      n, static_cast<float>(a), xc.data_ptr<float>(), yc.data_ptr<float>(), out.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

TORCH_LIBRARY_IMPL(torchsaxpy, CUDA, m) { m.impl("saxpy", &saxpy_cuda); }

}  // namespace torchsaxpy
