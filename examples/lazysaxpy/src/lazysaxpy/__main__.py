"""python -m lazysaxpy: run check() and print it as JSON."""

import json

from . import check

print(json.dumps(check(), indent=1))
