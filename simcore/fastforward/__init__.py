"""Fast-forward: how a replica (simcore/replica.py) takes many steps in one event, exact to the
bit against the reference loop (simcore/stepping.py), which imports nothing from here.

runs.py           how many steps a plan runs in one event, and when each ends
chunked.py        runs that start with a prompt's chunks beside decodes
arrival_folds.py  a sole replica's run going on past an arrival the policy can plan
applies.py        the commonest plans applied by short paths
tops.py           lone runs' largest gaps, reduced many runs at a time
switches.py       one switch per optimisation, to bisect a divergence from the reference
"""

from .switches import FastForward, switches

__all__ = ["FastForward", "switches"]
