"""The catalogue a run's physics reads: models and GPUs (:mod:`.hardware`, their presets
:mod:`.presets` and :mod:`.gpus`, prices :mod:`.prices`), the links between GPUs
(:mod:`.links`), mixture-of-experts and latent-attention shapes (:mod:`.moe`,
:mod:`.mla`), the analytic model's constants (:mod:`.cost_params`) and the KV pool a
model leaves on a card (:mod:`.pool`). Every figure names its source. Nothing here
reads a scenario; the scenario (``sim.config``) and the cost models (``sim.costs``)
read this.
"""
