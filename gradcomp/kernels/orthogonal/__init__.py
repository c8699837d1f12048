"""PowerSGD's orthogonalisation in one launch per call: `launcher` (entry point) and `jit` (the
`@triton.jit` source). Its torch reference is `gradcomp.compressors.orthogonalize` (Gram-Schmidt
for rank <= 2, QR above), which tests/test_kernels_orthogonal.py compares it with."""
