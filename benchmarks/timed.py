"""``hsdiff`` as its console script runs it, timing its own work: the imports the command needs first
(what the import-only baseline imports), then the command. Writes ``{"import_s", "work_s",
"work_cpu_s"}`` to the file named by ``HSDIFF_BENCH_TIMES``, so that the benchmark's *work* is
measured inside the process instead of as the difference of two noisy processes.

    HSDIFF_BENCH_TIMES=t.json python benchmarks/timed.py compare TRAIN INFER ...
"""

from __future__ import annotations

import json
import os
import sys
import time

t0, c0 = time.perf_counter(), time.process_time()
import hsdiff.cli.compare  # noqa: E402,F401  (the import-only baseline's imports)
import hsdiff.comparison  # noqa: E402,F401
from hsdiff.cli import main  # noqa: E402

t1, c1 = time.perf_counter(), time.process_time()
code: object = 0
try:
    main(sys.argv[1:])
except SystemExit as e:
    code = e.code
t2, c2 = time.perf_counter(), time.process_time()
with open(os.environ["HSDIFF_BENCH_TIMES"], "w") as f:
    json.dump({"import_s": round(t1 - t0, 4), "work_s": round(t2 - t1, 4), "work_cpu_s": round(c2 - c1, 4)}, f)
sys.exit(code)
