"""Build one row (host or container backend) and apply the row's CUDA contract."""
