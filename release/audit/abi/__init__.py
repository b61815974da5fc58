"""The platform-tag analysis derived from auditwheel: which manylinux/musllinux tags a wheel's ELF files
allow, graded by auditwheel's own policies (not rows.toml's: that is :mod:`release.policy`)."""
