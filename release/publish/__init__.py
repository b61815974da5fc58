"""Publish: check, audit again, upload, read back, in three wings.

- here: step (a release to a target: the guards, every variant prepared before the first upload),
  upload (one variant's effects, twine), dist_wheels (the audited wheels publish reads from dist/),
  staging (one publishing run: dist/'s lock, a private staging folder outside dist/), manifest and
  signing (the release manifest and its Ed25519 signature), verify and rebuild (the work of
  ``python -m release verify [--rebuild]``, whose command is :mod:`release.commands.verify`),
  channels (dependency channels);
- :mod:`release.publish.guards`: plan (pure decisions, the rules), conflicts, identity (one index
  per variant), reverify (the audit again, cold), seal (the bytes uploaded are the bytes audited),
  readback, deadlines, lock;
- :mod:`release.publish.index`: client and transport (index reads under one deadline), listing (one
  name, one file), the local index (server, local, lease, upload_check), static.
"""
