"""Random-k's kernels beside their torch reference: `reference` (the keyed Feistel permutation
whose first k values are the shared positions, in torch), `launcher` (entry points) and `jit`
(the `@triton.jit` sources, equal to `reference` bit for bit). tests/test_kernels_randomk.py
compares them. Only `reference` may be imported without Triton."""
