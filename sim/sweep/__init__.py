"""Many runs of one scenario: sweeps over a grid of settings and seeds, and capacity
searches for the highest arrival rate that meets an SLO.

:mod:`.spec` reads a sweep (file or command line) and expands its points;
:mod:`.points` resolves and validates each point, names its run folder by the hash of
its scenario and flattens its summary into a row; :mod:`.task` is one point as a
self-contained task (inputs in, run folder's bytes out); :mod:`.executors` runs tasks on
a local process pool or on Ray; :mod:`.store` writes run folders and tables whole and
resumes; :mod:`.driver` is ``pagesim sweep``; :mod:`.slo`, :mod:`.search` and
:mod:`.capacity` are ``pagesim capacity``; :mod:`.page` and :mod:`.capacity_page` draw
the HTML pages, :mod:`.tables` prints.
"""
