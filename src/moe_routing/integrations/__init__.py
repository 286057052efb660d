"""Integrations with engines and model libraries (each imports its library lazily)."""
