"""Model profiles: the Profile type and built-ins, architectures, measuring, the NetAI data."""
