"""The C++ consumer check: compile and link a small program against each SDK the wheel ships, with the
wheel's headers and libraries only, sandboxed (:mod:`release.core.sandbox`); its early start and its cache."""
