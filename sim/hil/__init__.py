"""Hardware in the loop: profiling pagesim's real paged backend (:mod:`.profiling`),
fitting the calibrated cost model to the profile (:mod:`.fit`), running steps on the
real backend inside a simulation (:mod:`.realbackend`) and validating the models against
measured runs (:mod:`.validation`, :mod:`.validation_report`). torch is imported only
where a step really runs."""
