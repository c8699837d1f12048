"""PowerSGD's orthogonalisation in one launch per call: `reference` (the torch code: Gram-Schmidt
for rank <= 2, QR above), `launcher` (entry point) and `jit` (the `@triton.jit` source);
tests/test_kernels_orthogonal.py compares the kernel with the reference."""
