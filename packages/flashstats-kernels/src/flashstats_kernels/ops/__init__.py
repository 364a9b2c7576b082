"""One folder per op, as in flash-linear-attention: a readable ``naive`` reference beside the fast code.

- ``forward``: output, LSE and the T1 row statistics.
- ``lookups``: the T2 post-pass lookups from the stored LSE.
- ``columns``: the T3 key-major column sums.
- ``dense``: the T4 materialised response block.
"""
