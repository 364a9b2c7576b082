"""Run every ``python`` block of a docs page in order, those marked ``example: skip`` included.

The docs tests (tests/docs/test_examples.py) run the blocks that a CPU can run and only compile the ones
marked as needing CUDA; on the GPU machine this runs all of them, in one namespace per page, as a reader
would paste them:

    python3 benchmarks/docs_blocks.py docs/guide/kernels.md

Prints ``ok block at line N`` per block and exits 1 when any fails (with its traceback).
"""

import re
import sys
import traceback
import types


def main(page: str) -> int:
    text = open(page, encoding="utf-8").read()
    module = types.ModuleType("__docs_page__")  # a real module: Dynamo looks functions up in sys.modules
    sys.modules[module.__name__] = module
    failed = 0
    for m in re.finditer(r"^```python\n(.*?)^```", text, re.S | re.M):
        line = text.count("\n", 0, m.start()) + 1
        try:
            exec(compile(m.group(1), f"{page}:{line}", "exec"), module.__dict__)
            print(f"ok block at line {line}", flush=True)
        except Exception:
            failed += 1
            print(f"FAILED block at line {line}", flush=True)
            traceback.print_exc()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
