"""Analysis tools: temporal Jacobians and their spectra (jacobian)."""
