"""Questions asked of the model: what-if sweeps, advice, time to accuracy."""
