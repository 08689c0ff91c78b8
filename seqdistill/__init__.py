"""seqdistill: distil big sequence-labelling models into small, fast taggers.

Two stages joined by one artifact, the soft-label cache (see docs/cache-format.md):
``distill-cache build`` writes it, ``distill-train --cache`` reads it.
"""

__version__ = "0.1.0"
