"""The size limits of the container backends; read when a file is opened, so a test or a caller may change them."""

from __future__ import annotations

import os

#: Largest file decompressed from gzip (bytes); larger is treated as a bomb and refused.
GZIP_LIMIT = int(os.environ.get("HSDIFF_GZIP_LIMIT", str(64 * 2**30)))
#: Largest expansion ratio accepted once more than :data:`GZIP_RATIO_AFTER` bytes came out. Tensors
#: of real activations compress by less than 2x; a gzip bomb expands about 1000x.
GZIP_MAX_RATIO = 100
GZIP_RATIO_AFTER = 64 * 2**20
#: Largest legacy (non-zip) torch file read fully into memory; zip archives are memory-mapped.
LEGACY_TORCH_LIMIT = 2 * 2**30
