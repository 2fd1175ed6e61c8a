"""Real output-length predictors on the planner model (torch; outside the pure-Python core).

* :mod:`.features` -- a forward hook on a decoder layer of the project's planner model: prompt
  and per-token hidden states (Trail's probe input), instruction embeddings (LTR's backbone).
* :mod:`.trail_probe` -- Trail's MLP probe over remaining-length bins with per-token Bayesian
  refinement; :class:`~.trail_probe.TrailProbePredictor` implements the core's
  ``LengthPredictor`` for the live node.
* :mod:`.ltr_ranker` -- a linear ranking head trained with ListMLE; Kendall's tau-b;
  :class:`~.ltr_ranker.LTRPredictor` (rank keys).
* ``weights/`` -- both predictors' trained weights and ``report.json``, written by their
  reproducible CPU training (``python -m timely_tools.training.train_predictors``).
"""
