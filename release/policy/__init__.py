"""rows.toml -> a validated Policy -> rows. Pure: no processes, no network."""
