"""Binary readers: ELF headers, sections, symbols and dynamic entries; CUDA fatbinaries, cubins and
images embedded as data; cuobjdump as a cross-check; the loader's library resolution (lddtree).

The floor every stage stands on: build, audit and smoke import it, and nothing in it imports a
stage (only ``release.core``). Pure readers of bytes; what a finding means is the audit's job.
"""
