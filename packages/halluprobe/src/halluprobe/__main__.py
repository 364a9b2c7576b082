"""``python -m halluprobe``: the CLI (what ``torchrun --nproc-per-node N -m halluprobe ...`` starts)."""

import sys

from halluprobe.cli._main import main

if __name__ == "__main__":
    sys.exit(main())
