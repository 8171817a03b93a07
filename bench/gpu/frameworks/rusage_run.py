"""Runs a Python program (runpy, as __main__) and prints the process's resource use to
stderr when it returns: `rusage utime_s=.. stime_s=.. minflt=.. majflt=.. nvcsw=.. nivcsw=..
maxrss_kib=..`. Used by jax_phases.sh to see where pinwise's wall-time overhead goes
(CPU time in user or kernel, page faults, context switches).
    python3 rusage_run.py PROGRAM.py [ARGS...]
"""
import resource
import runpy
import sys

prog = sys.argv[1]
sys.argv = sys.argv[1:]
try:
    runpy.run_path(prog, run_name="__main__")
finally:
    r = resource.getrusage(resource.RUSAGE_SELF)
    print(f"rusage utime_s={r.ru_utime:.3f} stime_s={r.ru_stime:.3f} minflt={r.ru_minflt} "
          f"majflt={r.ru_majflt} nvcsw={r.ru_nvcsw} nivcsw={r.ru_nivcsw} maxrss_kib={r.ru_maxrss}",
          file=sys.stderr, flush=True)
