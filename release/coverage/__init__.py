"""Coverage: which GPUs a row's arch list serves (native, PTX JIT or not at all), before anything is built,
and how that compares with the device code of its GPU dependency (torch). ``predict`` is pure; ``dependency``
reads a dependency's wheel with the audit's reader; ``compare`` is pure again. May import release.policy,
release.resources, release.binary, release.audit.reading and release.audit.checks.gpus; only the commands
and the release page (predict) import it."""
