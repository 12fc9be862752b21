"""The SimPy serving simulator: scenario, workload, engine, cost model, metrics, report."""
