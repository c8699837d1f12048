"""Benchmarks that measure and append rows: compress, collective, block-sparse, train, converge."""
