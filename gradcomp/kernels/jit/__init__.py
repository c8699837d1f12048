"""The `@triton.jit` sources, one module per kernel family beside its Python wrapper in
`gradcomp.kernels` (`quantize`, `sign`, `packing`, `stats`, `sparse`, `randomk`, `orthogonal`),
and `common`, the helpers several families share. Imported only on demand by the wrappers, so
that importing gradcomp never needs Triton. Set TRITON_INTERPRET=1 *before* they are first
imported to run the kernels on CPU tensors with Triton's interpreter (the tests do).

Conventions of the quantizer, sign, statistics and packing kernels
-------------------------------------------------------------------
* Every kernel works on a contiguous flat tensor of `n` elements with int32 index arithmetic
  (the wrappers fall back to torch for tensors whose bit count does not fit in int32).
* Encoders read a tile of shape (ROWS, G, 8): 8 consecutive elements form one *group*, whose
  `BITS`-bit codes make exactly `BITS` bytes of the MSB-first bit stream of `bitpack.pack`.
  A group is packed in registers (`store_packed`), so codes never go through memory unpacked.
  - "rows" kernels (`*_rows_kernel`): one tile row is one quantization block (block_size a
    multiple of 8, padded to the power of two 8 * G); the block's statistic (absmax, min/max,
    norm, mean |x|...) is reduced in registers and the codes written in the same pass: one read
    of the input, one write of codes and scales.
  - "elem" kernels (`*_elem_kernel`): a tile row is 8 * G consecutive elements; the block
    statistic of every element is gathered from a small array computed beforehand (by
    `partial_kernel` + a tiny torch reduction), so any block size works, including the whole
    tensor (BS == 0).
* Decoders (`*_decode_kernel`) are element-wise over a 1-D tile: each element gathers the one or
  two bytes holding its code and its block's statistic, and writes the output dtype directly.
* Arithmetic mirrors the torch reference operation by operation, in float32, with IEEE-rounded
  division (`div_rn`) and square root (`sqrt_rn`); launch with enable_fp_fusion=False so that no
  multiply-add is contracted into an FMA. Where the torch reference divides a tensor by a Python
  number, torch's CUDA kernels multiply by the float32 reciprocal instead; RECIP=True mirrors
  that (set for CUDA tensors), RECIP=False divides (CPU). So round-to-nearest results equal the
  torch reference on the same device bit for bit.
* Error feedback (trailing arguments, off by default): with RES the encoders and statistics
  passes read a float32 residual beside x and work on corrected = float32(x) + residual rounded
  to x's dtype, as `ErrorFeedback` hands `corrected.to(dtype)` to the compressor; with EF the
  encoders also write the new residual corrected - decoded (the decoder's value rounded to x's
  dtype, NaN/+-Inf set to 0) from registers. EF without RES is the first step (corrected = x).
"""
