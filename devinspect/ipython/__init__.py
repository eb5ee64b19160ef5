"""The IPython layer, on top of everything else: the extension's load and unload, one
module per magic family (as IPython's own ``IPython/core/magics/``), and the runner
that runs a ``%%devcheck`` cell as a plain cell would. Only this package imports IPython.
"""
