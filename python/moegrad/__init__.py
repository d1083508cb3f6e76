"""moegrad: Mixture-of-Experts routing operators and their exact gradients, on CPU.

`moegrad.torch` holds the PyTorch functions (imported on demand, so `import moegrad` works without torch).
The extension `moegrad._C` takes tensors as raw (data_ptr, dtype code, sizes, strides) tuples.
"""
from . import _C

__version__ = _C.version()


def version():
    """The version of libmoegrad in use."""
    return _C.version()


def simd_target():
    """The SIMD target the kernels dispatch to on this CPU, e.g. "AVX2"."""
    return _C.simd_target()


def num_threads():
    """Worker threads of every later call."""
    return _C.num_threads()


def set_num_threads(n):
    """Sets the worker threads (n >= 1; 0 restores the default). Results are bit-identical for every n."""
    _C.set_num_threads(int(n))


__all__ = ["version", "simd_target", "num_threads", "set_num_threads", "__version__"]
