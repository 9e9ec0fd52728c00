"""The native library, seen from the installer: compile it, self-test it, call it.

- `compilers`: which C compiler this machine has, in a fixed search order.
- `build`: compile every SIMD variant of `payload/` (its C units) into the cache and self-test it.
- the kernels (`quantize`, `dequantize`, `matvec`, ...) are the ctypes bridge in
  `h3kit.bundled.h3k_native`, re-exported here so `h3kit.native.quantize` keeps
  the name docs/native.md documents. The bridge itself is stdlib-only because the
  node pack carries a copy of it into ComfyUI's interpreter.
"""

from h3kit.bundled.h3k_native import *  # noqa: F401,F403 - the contract's public names
from h3kit.bundled.h3k_native import __all__  # noqa: F401
