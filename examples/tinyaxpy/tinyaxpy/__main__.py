"""python -m tinyaxpy [--info | --sdk | --selftest [N]]: print JSON (selftest is the default)."""

from __future__ import annotations

import json
import sys

import tinyaxpy


def main(argv: list[str]) -> int:
    what = argv[0] if argv else "--selftest"
    if what == "--info":
        result = tinyaxpy.build_info()
        result["cuda_runtime_version"] = tinyaxpy.cuda_runtime_version()
    elif what == "--sdk":
        result = tinyaxpy.sdk_paths()
    elif what == "--selftest":
        result = tinyaxpy.selftest(int(argv[1]) if len(argv) > 1 else 1 << 20)
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
