"""Sign compressors' kernels (signsgd, efsignsgd, onebit) beside the torch code they must equal:
`reference` (the torch encode and decode), `launcher` (entry points) and `jit` (the
`@triton.jit` sources). tests/test_kernels.py and test_kernels_ef.py compare them. Only
`reference` may be imported without Triton."""
