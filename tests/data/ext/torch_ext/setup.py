"""A one-kernel torch CUDA extension: ``tiny_torch_ext._C`` (a CPython module that links libtorch).

``tiny_torch_ext.ops`` imports torch first, then ``_C``; ``_C`` alone only imports after torch
(libc10.so is found because torch loaded it), the import-order fault verify must name.
"""
import os

import torch
import torch.utils.cpp_extension as cpp
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

if torch.version.cuda is None and cpp.CUDA_HOME is None:
    # A CPU torch (CI has no GPU) does not look for a toolkit; use the one the build was given.
    cpp.CUDA_HOME = os.environ.get("CUDA_HOME")

ext = CUDAExtension("tiny_torch_ext._C", ["csrc/module.cpp", "csrc/kernel.cu"])
if torch.version.cuda is None:  # a CPU torch (CI): there is no libc10_cuda/libtorch_cuda to link
    ext.libraries = [lib for lib in ext.libraries if lib not in ("c10_cuda", "torch_cuda")]

setup(name="tiny_torch_ext", version="0.1.0", packages=["tiny_torch_ext"], ext_modules=[ext],
      cmdclass={"build_ext": BuildExtension})
