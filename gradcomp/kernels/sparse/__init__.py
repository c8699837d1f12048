"""Exact top-k and threshold selection beside the torch code it must equal: `reference` (the
torch selection the compressors run on CPU tensors, and the kernels' specification), `launcher`
(entry points) and `jit` (the `@triton.jit` sources). tests/test_kernels_sparse.py compares
them on fresh random inputs. Only `reference` may be imported without Triton."""
