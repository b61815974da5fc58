"""The host backend: a row built on this machine, in an isolated build environment of the project's
own ``[build-system]``, from a fixed compile folder, natively or cross-compiled for another CPU arch."""
