"""gradcomp inside trainers: `gradcomp.integrations.lightning.Compression` (a PyTorch Lightning
callback) and `gradcomp.integrations.accelerate.register` (Hugging Face Accelerate).

Each submodule imports its trainer; importing `gradcomp` or this package imports neither. Above
`comm` in the layers: these modules use `comm` and `compressors`, and nothing in gradcomp
imports them."""
