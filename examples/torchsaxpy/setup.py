"""Build torchsaxpy._C, the way PyTorch's extension-cpp template does.

CUDA kernels are compiled when torch finds a CUDA toolkit (CUDA_HOME, else nvcc on PATH,
else /usr/local/cuda); otherwise only the CPU kernel is. The GPU architectures come from
TORCH_CUDA_ARCH_LIST, or from the GPUs visible at build time when it is unset.
"""

from setuptools import setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension

sources = ["csrc/saxpy.cpp"]
compile_args = {"cxx": ["-O2"], "nvcc": ["-O2"]}

if CUDA_HOME is not None:
    extension = CUDAExtension(
        "torchsaxpy._C",
        [*sources, "csrc/saxpy_cuda.cu"],
        extra_compile_args=compile_args,
        py_limited_api=True,
    )
else:
    extension = CppExtension(
        "torchsaxpy._C", sources, extra_compile_args={"cxx": compile_args["cxx"]}, py_limited_api=True
    )

setup(
    ext_modules=[extension],
    cmdclass={"build_ext": BuildExtension},
    # _C uses only CPython's limited API (cpp_extension defines Py_LIMITED_API for 3.10), so
    # one wheel serves every CPython from 3.10 on that torch 2.14.1 supports.
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
