"""Observers of the run model and what reads run records: the run record itself (:mod:`.record`),
the terminal (:mod:`.terminal`, :mod:`.tables`), ``-v`` diagnostics (:mod:`.diagnostics`), the HTML
report (:mod:`.report_model`, :mod:`.html`, ``templates/``), Prometheus metrics (:mod:`.metrics`),
past runs (:mod:`.history`) and the published schemas (:mod:`.schema`)."""
