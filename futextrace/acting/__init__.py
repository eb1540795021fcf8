"""Acting on the advice: setting a process's futex hash size from outside it, at its
launch (launch.py) or while it runs (inject.py), after the checks in preflight.py."""
