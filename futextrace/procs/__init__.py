"""Process plumbing that the run, `snapshot` and acting/ share: checks on a
target and its name (targets.py, also the command futextrace starts),
the proc connector's events (procevents.py), each process's hash now through
the task iterator (hashread.py) as rows (hashrows.py), and the signals that
end a run (stopsignals.py)."""
