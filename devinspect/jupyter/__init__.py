"""The live layer: ipywidgets views, dashboards, timers and threads.

Only this package (and :mod:`devinspect.magics`) imports ipywidgets or IPython;
:mod:`devinspect.render` stays pure functions of the data.
"""
