"""The performance model: network, topology, method and block-sparse costs, timeline, fits."""
