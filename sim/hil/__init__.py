"""Hardware in the loop: profiling pagesim's real paged backend (:mod:`.profiling`),
fitting the calibrated cost model to the profile (:mod:`.fit`) and validating the models
against runs measured on the real backend (:mod:`.validation`, :mod:`.validation_report`;
the measured executor is :mod:`sim.costs.measured`). torch is imported only where a step
really runs."""
