"""``headwater bench``: Headwater measured against the 2011 paper, Kreps' 2014 figures and the machine.

Every run measures its own baselines on the same machine (W: raw loopback TCP appended to a file;
R: raw ``sendfile`` from a file to a loopback socket) and reports each figure as a median of
several runs, with min and max, and as a ratio to its baseline. See ``docs/performance.md``.
"""
