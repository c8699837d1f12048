"""Exact top-k and threshold selection: `launcher` (entry points) and `jit` (the `@triton.jit`
sources); the torch selection they must equal is the compressors' (`gradcomp.compressors.
sparsify`), and tests/test_kernels_sparse.py compares them on fresh random inputs."""
