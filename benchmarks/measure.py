"""Run a command and write its wall time, CPU time and peak RSS as JSON:

    python -S benchmarks/measure.py RESULT.json CMD [ARGS...]

A separate small process on purpose: Linux counts in a child's ``ru_maxrss`` the memory of the
process it was forked from, so a benchmark driver holding torch and data would inflate every
figure. This runner holds almost nothing when it forks. Standard library only.
"""

import json
import os
import sys
import time


def main() -> None:
    out, cmd = sys.argv[1], sys.argv[2:]
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        try:
            os.execvp(cmd[0], cmd)
        finally:
            os._exit(127)
    _, status, ru = os.wait4(pid, 0)
    wall = time.perf_counter() - t0
    with open(out, "w") as f:
        json.dump(
            {
                "wall_s": round(wall, 3),
                "cpu_s": round(ru.ru_utime + ru.ru_stime, 3),
                "peak_rss_mb": round(ru.ru_maxrss / 1024, 1),
                "exit": os.waitstatus_to_exitcode(status),
            },
            f,
        )


if __name__ == "__main__":
    main()
