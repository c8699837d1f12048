"""Helpers every layer uses: environment and spawning, timing, result tables, rate units."""
