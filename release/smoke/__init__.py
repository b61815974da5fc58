"""Install a wheel in a fresh venv, prove where its CUDA runtime comes from, run it."""
