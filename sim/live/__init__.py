"""pagesim against live endpoints: observe one (replay a scenario's requests over
HTTP and record them as a run), serve one (the engine and the real backend behind an
OpenAI-compatible API), and compare or calibrate the simulator with what was observed.

``client`` streams one request; ``replay`` sends a scenario's requests in real time;
``observed`` turns what came back into a run folder; ``compare`` and ``fit`` set an
observed run against a simulation and fit the cost model to it; ``driver`` runs the
engine in wall-clock time, ``server`` is the HTTP app over it, ``metrics`` its
Prometheus page. The HTTP stack (aiohttp, prometheus-client: the ``serve`` extra) is
imported only inside the functions that need it.
"""
