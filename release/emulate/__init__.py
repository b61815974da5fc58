"""Running another CPU architecture's programs on this machine (aarch64 under qemu-user on x86_64):
whether it can (:mod:`.binfmt`), Debian apt kept private (:mod:`.apt`), arm64 sysroots with CPython
(:mod:`.sysroot`), and the emulated interpreter of a row (:mod:`.python`). Imports release.core
and release.binary only."""
