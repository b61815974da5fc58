"""The stand-in builder image: its recipe (recipe.toml, recipe.py) and podman's containers.conf."""
