"""An attempt's life: the dispatcher (one Ray job and MLflow run per attempt), the attempt
driver (submit, poll, stall and outage limits, retry), the adaptive seeds' gate, identical cells
run once, the outage clocks and the launch's watch on its two services.
"""
