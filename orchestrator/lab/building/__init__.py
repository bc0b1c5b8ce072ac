"""How a lab is assembled from its models: the scenarios and their planted faults, the build and its calibration, the
recipe key, the shipped models, the Qwen3 lab, and the inventories that point a run at a lab (either engine)."""
