"""The small core every stage uses: errors, the subprocess wrapper, logging, hashing."""
