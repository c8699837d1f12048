"""gradcomp: gradient compression for data-parallel training, and a model of when it pays."""
from .compressors import compressor, names

__version__ = "0.1.0"
__all__ = ["compressor", "names", "__version__"]
