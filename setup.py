"""Everything is in setup.cfg; this file adds the optional C loop (``hsdiff/_fused.c``), a speed-up of
the large-dump walk. The build never fails for want of it: without a C compiler or Python's headers
the loop is left out and hsdiff sums rows with numpy, as it does at run time under ``HSDIFF_NO_C=1``.
With ``HSDIFF_NO_C=1`` at build time the loop is not tried at all and the wheel is pure Python
(``py3-none-any``): the wheel ``make dist`` builds for release. The sdist always carries the C source
(MANIFEST.in), so ``pip install --no-binary hsdiff hsdiff`` builds the loop where a compiler is; where
the build of the loop fails, the wheel holds no compiled code but keeps the platform's tag."""

import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """build_ext that warns, never fails, when the C loop cannot be built (no compiler, no headers)."""

    def run(self):
        try:
            super().run()
        except Exception as e:  # noqa: BLE001 - any failure of an optional speed-up leaves the numpy path
            self.warn(f"the optional C loop was not built ({e}); hsdiff will use its numpy path")

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as e:  # noqa: BLE001
            self.warn(f"the optional C loop was not built ({e}); hsdiff will use its numpy path")


LOOP = Extension("hsdiff._fused", ["hsdiff/_fused.c"], optional=True, extra_compile_args=["-O3", "-fno-fast-math"])

setup(
    ext_modules=[] if os.environ.get("HSDIFF_NO_C") == "1" else [LOOP],
    cmdclass={"build_ext": OptionalBuildExt},
)
