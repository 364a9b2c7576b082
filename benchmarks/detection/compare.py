"""The change in every number of the main detection table between two runs (``main.csv`` files).

Usage: ``python benchmarks/detection/compare.py OLD/main.csv NEW/main.csv > delta.md``
(`halluprobe.evaluation._tables.compare_markdown`).
"""

import sys
from pathlib import Path

from halluprobe.evaluation._tables import compare_markdown, read_csv

if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: compare.py OLD/main.csv NEW/main.csv")
    sys.stdout.write(compare_markdown(read_csv(Path(sys.argv[1])), read_csv(Path(sys.argv[2]))))
