"""The live layer: ipywidgets views, dashboards, timers and threads.

Only this package imports ipywidgets (and, beside the IPython layer, traitlets);
:mod:`devinspect.render` stays pure functions of the data.
"""
