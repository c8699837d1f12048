"""Quantizers' kernels (int8, int4, qsgd, terngrad, natural), each beside the torch code it
must equal: `reference` (the torch encode and decode the compressors run on CPU tensors and
float64, and the kernels' specification), `launcher` (the Python entry points: checks, tile
configuration, launches) and `jit` (the `@triton.jit` sources). tests/test_kernels.py,
test_kernels_ef.py and test_kernels_mean.py compare them on fresh random inputs. Only
`reference` may be imported without Triton."""
