"""Everything is in setup.cfg; this file adds the optional C loop (hsdiff/_fused.c). Without a C
compiler the build skips it and hsdiff uses its numpy path."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("hsdiff._fused", ["hsdiff/_fused.c"], optional=True,
                             extra_compile_args=["-O3", "-fno-fast-math"])])
