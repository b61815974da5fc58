"""The CUDA repair both backends share: auditwheel's argv (every CUDA library excluded), the
row's contract applied to the wheel (RUNPATH, declared CUDA packages, label), auditwheel for
another CPU arch, and the deterministic wheel rewriter."""
