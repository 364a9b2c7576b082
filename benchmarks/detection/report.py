"""Rebuild a results folder's tables from its CSV/JSON alone, or compare two runs' main tables.

``python benchmarks/detection/report.py RESULTS_FOLDER``: when a run's analysis wrote ``main.csv``,
``judge.json``, ``extract.json`` and ``cost.json`` but stopped before its report
(`halluprobe.evaluation._tables.rebuild_report`). ``python benchmarks/detection/report.py OLD/main.csv
NEW/main.csv > delta.md``: the change in every number of the main table (`compare_markdown`).
"""

import sys
from pathlib import Path

from halluprobe.evaluation._tables import compare_markdown, read_csv, rebuild_report

if __name__ == "__main__":
    if len(sys.argv) == 2:
        rebuild_report(Path(sys.argv[1]))
    elif len(sys.argv) == 3:
        sys.stdout.write(compare_markdown(read_csv(Path(sys.argv[1])), read_csv(Path(sys.argv[2]))))
    else:
        sys.exit("usage: report.py RESULTS_FOLDER, or report.py OLD/main.csv NEW/main.csv")
