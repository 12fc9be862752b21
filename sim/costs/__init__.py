"""Step time, predicted: the analytic kernel-level model (:mod:`.analytic` over
:mod:`.kernels`), the calibrated unit-cost model (:mod:`.calibrated`) and the model that
interpolates Vidur's published GPU profiles (:mod:`.profile` over :mod:`.vidur`); or
measured, on the real backend (:mod:`.measured`, imported only when asked for, so the
simulator never needs torch). Each is an executor: ``execute(batch) -> seconds``."""

from sim.costs.analytic import AnalyticCostModel, StepCost
from sim.costs.calibrated import CalibratedCostModel
from sim.costs.profile import ProfileCostModel

__all__ = ["AnalyticCostModel", "CalibratedCostModel", "ProfileCostModel", "StepCost"]
