"""A CPU-only torch C++ extension: ``tiny_cpp_ext._C`` (a CPython module that links libc10).

As most torch extensions' setup.py do: setuptools, then ``torch.utils.cpp_extension``.
"""
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

setup(name="tiny_cpp_ext", version="0.1.0", packages=["tiny_cpp_ext"],
      ext_modules=[CppExtension("tiny_cpp_ext._C", ["csrc/module.cpp"])],
      cmdclass={"build_ext": BuildExtension})
