"""The audit's checks, one module per check: each declares its name, title and function (``SPEC``);
:mod:`release.audit.registry` lists them in report order. ``owners`` is part of ``hygiene``."""
