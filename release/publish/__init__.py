"""Publish: check, audit again, upload, read back; the index client, the local index server.

plan (pure decisions, the rules) | reverify (the audit again, cold; GPU evidence) | seal (the
bytes uploaded are the bytes audited) | upload (one variant's effects) | rows (a release: guards,
every variant prepared first) | manifest, verify (the release manifest and ``python -m release
verify``) | lock, session (one run at a time, a private staging folder outside dist/) | deadlines,
transport, index_client (index reads under one deadline) | listing (one name, one file) |
readback (listed, served and audited bytes compared) | conflicts (a different file under our
name) | index_server, local_index, upload_check (the local index) | static_index | channels
(dependency channels).
"""
