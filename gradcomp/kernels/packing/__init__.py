"""MSB-first bit packing of sub-byte codes: `reference` (the torch `pack` / `unpack` every
compressor uses, and the stream layout the quantizer and sign kernels write), `launcher` and
`jit` (the Triton kernels, equal to it bit for bit; tests/test_kernels.py compares them). Only
`reference` may be imported without Triton."""
